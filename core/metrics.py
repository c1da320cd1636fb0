"""The portal's Prometheus metrics (the `prometheus_client` library), for the team's own monitoring.

What a process counts as it happens lives here as module-level metrics on one registry: request
latency by route (`RequestMetricsMiddleware`), chat turns and their time to first token, search
latency. What is read when Prometheus scrapes (the queue of chat turns, the LLM servers' slots,
builds and syncs from the database) is a collector an app registers on `REGISTRY` in its
`AppConfig.ready()`; so this module, in the ground, names no app. The roof serves `REGISTRY` at
`/metrics` (`hdrag_site.monitoring`).

Counters and histograms are per process: Prometheus scrapes each web process (a target each), and
numbers read from the database (builds, syncs) are the same from any of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry()

# Seconds, from a cached page (a few ms) to a long upload or export.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Seconds to a chat answer's first token: prefill of a long prompt on CPUs takes seconds.
FIRST_TOKEN_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
SEARCH_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

REQUEST_SECONDS = Histogram(
    "hdrag_http_request_duration_seconds", "HTTP requests by route pattern, method and status class.",
    ["route", "method", "status"], buckets=REQUEST_BUCKETS, registry=REGISTRY)
CHAT_TURNS = Counter(
    "hdrag_chat_turns", "Chat turns ended, by surface (chat, openai) and how the answer ended.",
    ["surface", "status"], registry=REGISTRY)
FIRST_TOKEN_SECONDS = Histogram(
    "hdrag_chat_time_to_first_token_seconds", "From a turn's start to its answer's first token.",
    ["surface"], buckets=FIRST_TOKEN_BUCKETS, registry=REGISTRY)
LLM_ANSWERS = Counter(
    "hdrag_llm_answers", "Answers streamed from an LLM server (every surface), by model, server and outcome.",
    ["model", "server", "outcome"], registry=REGISTRY)
LLM_FIRST_TOKEN_SECONDS = Histogram(
    "hdrag_llm_time_to_first_token_seconds", "From an answer's wait for the LLM queue to its first token "
    "(the queue and the prefill; every surface).", ["model"], buckets=FIRST_TOKEN_BUCKETS, registry=REGISTRY)
SEARCH_SECONDS = Histogram(
    "hdrag_search_duration_seconds", "Memory searches (pages, API and chat retrieval).",
    buckets=SEARCH_BUCKETS, registry=REGISTRY)


def chat_turn_observe(*, surface: str, status: str, first_token_seconds: float | None) -> None:
    """Count one ended chat turn (`status`: complete, stopped, repetition, error, ...)."""
    CHAT_TURNS.labels(surface=surface, status=status).inc()
    if first_token_seconds is not None:
        FIRST_TOKEN_SECONDS.labels(surface=surface).observe(first_token_seconds)


def llm_answer_observe(*, model: str, server: str, outcome: str, first_token_seconds: float | None) -> None:
    """Count one answer an LLM server streamed, or failed to (`outcome`: answered, looping, failed,
    cancelled)."""
    LLM_ANSWERS.labels(model=model, server=server, outcome=outcome).inc()
    if first_token_seconds is not None:
        LLM_FIRST_TOKEN_SECONDS.labels(model=model).observe(first_token_seconds)


class RequestMetricsMiddleware:
    """Times each HTTP request under its URL pattern (`corpora/<int:corpus_id>/`, never the path a
    client sent, so the label set stays bounded); a request that matched no pattern is `unmatched`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in METHODS else "other"
        REQUEST_SECONDS.labels(route=route, method=method, status=f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started)
        return response
