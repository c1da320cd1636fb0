"""Memory search (one corpus, or several) and single memories."""

from __future__ import annotations

import time
from collections.abc import Iterable

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import (
    MemoryResultSerializer,
    MemorySerializer,
    MultiSearchQuerySerializer,
    SearchQuerySerializer,
    SearchResponseSerializer,
)
from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path
from core.errors import ConflictError
from corpus.models import Corpus
from corpus.selectors import corpora_visible_to, get_corpus_for_user
from memory.selectors import get_memory_for_user
from memory.services import memories_search

SEARCH_PARAMETERS = [
    OpenApiParameter("q", str, required=True, description="The query text (at most 2000 characters)."),
    OpenApiParameter(
        "datasets", str, description="Comma-separated dataset ids to search (default: every enabled dataset)."
    ),
    OpenApiParameter(
        "budget", int, description="Most tokens of memories (pipeline mode; default the engine's)."
    ),
    OpenApiParameter(
        "mode",
        str,
        enum=["pipeline", "raw"],
        description="pipeline (default): what the chat "
        "retrieves (threshold, fusion, MMR within the budget); raw: the index's top `limit` rows.",
    ),
    OpenApiParameter(
        "limit",
        int,
        description="At most this many results, in either mode (raw mode's default "
        "50; pipeline mode: all the budget holds unless given; at most 1000).",
    ),
    OpenApiParameter("top_document", bool, description="Only the best memory (pipeline mode)."),
    *PAGE_PARAMETERS,
    OpenApiParameter(
        "Server-Timing",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description="`search;dur=<ms>`: the search's own time (`took_ms`), readable without "
        "parsing the body (browsers' developer tools show it too).",
    ),
]


class _Search(ApiView):
    def search(self, request: Request, params: dict, *, corpus_ids: Iterable[int] = (),
               corpora: list[Corpus] | None = None) -> Response:
        raw = params["mode"] == "raw"
        started = time.perf_counter()
        results = memories_search(
            user=request.user,
            corpus_ids=corpus_ids,
            corpora=corpora,
            query=params["q"],
            token_budget=params.get("budget"),
            top_document=params["top_document"],
            dataset_ids=params.get("datasets"),
            raw_limit=params["limit"] if raw else None,
        )
        if not raw and "limit" in request.query_params:
            results = results[:params["limit"]]  # the best ones: pipeline results are in rank order
        took_ms = round((time.perf_counter() - started) * 1000, 3)
        response = self.paginated(results, MemoryResultSerializer, took_ms=took_ms)
        response["Server-Timing"] = f"search;dur={took_ms}"
        return response


class CorpusSearch(_Search):
    @extend_schema(operation_id="corpora_search", summary="Search one corpus's memories",
                   parameters=[id_path("corpus_id", "corpus"), *SEARCH_PARAMETERS],
                   responses={200: SearchResponseSerializer, **errors(400, 409)}, tags=["search"])
    def get(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_for_user(request.user, corpus_id)
        serializer = SearchQuerySerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        if not corpus.active_build_id:
            raise ConflictError("This corpus has no index yet: start a build first.", {"corpus": corpus.pk})
        return self.search(request, serializer.validated_data, corpora=[corpus])


class Search(_Search):
    @extend_schema(
        operation_id="search",
        summary="Search several corpora together",
        parameters=[
            OpenApiParameter(
                "corpora",
                str,
                description="Comma-separated corpus ids (default: "
                "every corpus you may read that has an index).",
            ),
            *SEARCH_PARAMETERS,
        ],
        responses={200: SearchResponseSerializer, **errors(400)},
        tags=["search"],
    )
    def get(self, request: Request) -> Response:
        serializer = MultiSearchQuerySerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        params = serializer.validated_data
        if "corpora" in params:
            for corpus_id in params["corpora"]:
                get_corpus_for_user(request.user, corpus_id)  # 404 for any corpus the caller may not read
            corpus_ids = params["corpora"]
        else:
            corpus_ids = list(corpora_visible_to(request.user).filter(active_build__isnull=False)
                              .values_list("pk", flat=True))
        return self.search(request, params, corpus_ids=corpus_ids)


class MemoryDetail(ApiView):
    @extend_schema(operation_id="memories_get", summary="One memory's full text and origin",
                   parameters=[id_path("memory_id", "memory")], responses={200: MemorySerializer, **errors()},
                   tags=["search"])
    def get(self, request: Request, memory_id: int) -> Response:
        return Response(MemorySerializer(get_memory_for_user(request.user, memory_id)).data)
