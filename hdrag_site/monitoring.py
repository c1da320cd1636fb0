"""The portal's monitoring endpoints (entry points, so they live in the roof): `/metrics`, the
Prometheus text of `core.metrics.REGISTRY`, and `/healthz/dependencies`, which says which dependency
is down (database, broker, each LLM server, the object store) where `/healthz` only says the web
process is alive. Both answer only a request with `METRICS_TOKEN` or from `METRICS_ALLOWED_NETWORKS`
(docs/deployment.md "Monitoring")."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from ipaddress import ip_address, ip_network

import httpx
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from accounts.throttle import client_address
from chat.llm.clients import llm_servers
from chat.llm.servers import LLMServer
from core.metrics import REGISTRY
from corpus.object_store import object_store
from hdrag_site.celery import app as celery_app

FORBIDDEN = "Monitoring needs METRICS_TOKEN or an address in METRICS_ALLOWED_NETWORKS."


def monitoring_allowed(request: HttpRequest) -> bool:
    """A bearer `METRICS_TOKEN` (compared in constant time), or a client address in
    `METRICS_ALLOWED_NETWORKS`; with neither setting, nobody."""
    token = settings.METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    address = client_address(request)
    if not settings.METRICS_ALLOWED_NETWORKS or address is None:
        return False
    return any(ip_address(address) in ip_network(network, strict=False)
               for network in settings.METRICS_ALLOWED_NETWORKS)


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    if not monitoring_allowed(request):
        return HttpResponseForbidden(FORBIDDEN, content_type="text/plain")
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


@dataclass
class DependencyState:
    """One dependency as the health endpoint shows it: never a secret, nor a server's answer."""

    name: str
    target: str
    up: bool
    seconds: float
    error: str = ""


def _checked(name: str, target: str, check: Callable[[], None]) -> DependencyState:
    started = time.perf_counter()
    try:
        check()
    except Exception as error:  # any failure means down; only its kind is shown, never its text
        detail = str(error) if isinstance(error, _Refused) else type(error).__name__
        return DependencyState(name, target, False, round(time.perf_counter() - started, 3), detail)
    return DependencyState(name, target, True, round(time.perf_counter() - started, 3))


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as broker:
        broker.ensure_connection(max_retries=1, timeout=settings.HEALTH_CHECK_TIMEOUT)


class _Refused(Exception):
    """A dependency that answered, but not as a healthy one does (its status code, never its body)."""


def _llm(server: LLMServer) -> Callable[[], None]:
    def check() -> None:
        headers = {"Authorization": f"Bearer {server.key}"} if server.key else {}
        response = httpx.get(
            f"{server.url}/v1/models", headers=headers, timeout=settings.HEALTH_CHECK_TIMEOUT
        )
        if response.status_code != 200:
            raise _Refused(f"answered {response.status_code}")
    return check


def _object_store() -> None:
    store = object_store()
    if store is not None:
        store.ping()


def dependencies_check() -> list[DependencyState]:
    """Every dependency of this process, checked at once (each within HEALTH_CHECK_TIMEOUT); the
    database on the request's own thread, which owns its connection."""
    checks: list[tuple[str, str, Callable[[], None]]] = [("broker", settings.CELERY_BROKER_URL.split("://")[0],
                                                          _broker)]
    checks += [
        ("llm", f"{server.shown_url} ({server.model})" if server.model else server.shown_url, _llm(server))
        for server in llm_servers()
    ]
    if settings.BUILD_STORAGE_URL:
        checks.append(("object_store", settings.BUILD_STORAGE_URL, _object_store))
    with ThreadPoolExecutor(max_workers=len(checks), thread_name_prefix="health") as pool:
        pending = [pool.submit(_checked, *check) for check in checks]
        database = _checked("database", connection.vendor, _database)
        return [database, *(future.result() for future in pending)]


@login_not_required
def dependencies(request: HttpRequest) -> HttpResponse:
    """200 when every dependency answers, else 503; either way each one with its state."""
    if not monitoring_allowed(request):
        return HttpResponseForbidden(FORBIDDEN, content_type="text/plain")
    states = dependencies_check()
    up = all(state.up for state in states)
    return JsonResponse(
        {"status": "up" if up else "down", "dependencies": [asdict(state) for state in states]},
        status=200 if up else 503,
    )
