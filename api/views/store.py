"""A corpus's multi-vector store over HTTP (storage contract): adds, searches, embeddings, deletes.

Embeddings travel as JSON float arrays or as {"base64": little-endian float32, "shape": [...]};
the services in `corpus.services.multivector` check access (read to search, write to add or delete).
"""

from __future__ import annotations

import base64

import numpy as np
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.store_serializers import (
    EmbeddingsResponseSerializer,
    StoreAddedSerializer,
    StoreAddSerializer,
    StoreBatchSerializer,
    StoreDeletedSerializer,
    StoreDocumentSerializer,
    StoreHitSerializer,
    StoreMultiSearchSerializer,
    StoreSearchSerializer,
    StoreStatsSerializer,
)
from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path, page_of
from core.errors import ApplicationError
from corpus.services.multivector import (
    store_add,
    store_document_delete,
    store_documents,
    store_embeddings_get,
    store_search,
    store_search_multivector,
    store_stats,
)

CORPUS = id_path("corpus_id", "corpus")
TAGS = ["store"]
# What each add answers: the ids of the records written, in the order given.
ADDED = {201: StoreAddedSerializer, **errors(400, 403, 413, 503)}


def _add(request: Request, corpus_id: int, kind: str) -> Response:
    serializer = StoreAddSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    ids = store_add(
        user=request.user,
        corpus_id=corpus_id,
        kind=kind,
        doc_id=data["doc_id"],
        indices=[data["index"]],
        embeddings=[data["embeddings"]],
        metadata=[data["metadata"]],
    )
    return Response(StoreAddedSerializer({"ids": ids}).data, status=status.HTTP_201_CREATED)


class StoreStats(ApiView):
    @extend_schema(operation_id="store_stats", summary="Record counts, documents and approximate size",
                   parameters=[CORPUS], responses={200: StoreStatsSerializer, **errors(503)}, tags=TAGS)
    def get(self, request: Request, corpus_id: int) -> Response:
        stats = store_stats(user=request.user, corpus_id=corpus_id)
        return Response(StoreStatsSerializer(stats).data)


class StorePages(ApiView):
    @extend_schema(operation_id="store_add_page", summary="Add (upsert) one page's multi-vector (visual)",
                   parameters=[CORPUS], request=StoreAddSerializer,
                   responses=ADDED, tags=TAGS)
    def post(self, request: Request, corpus_id: int) -> Response:
        return _add(request, corpus_id, "visual")


class StoreChunks(ApiView):
    @extend_schema(operation_id="store_add_chunk", summary="Add (upsert) one chunk's multi-vector (text)",
                   parameters=[CORPUS], request=StoreAddSerializer,
                   responses=ADDED, tags=TAGS)
    def post(self, request: Request, corpus_id: int) -> Response:
        return _add(request, corpus_id, "text")


class StoreBatch(ApiView):
    @extend_schema(
        operation_id="store_add_batch",
        summary="Add several pages or chunks of one document at once (all validated before any is written)",
        parameters=[CORPUS],
        request=StoreBatchSerializer,
        responses=ADDED,
        tags=TAGS,
    )
    def post(self, request: Request, corpus_id: int) -> Response:
        serializer = StoreBatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        items = data["items"]
        ids = store_add(
            user=request.user,
            corpus_id=corpus_id,
            kind=data["kind"],
            doc_id=data["doc_id"],
            indices=[item["index"] for item in items],
            embeddings=[item["embeddings"] for item in items],
            metadata=[item["metadata"] for item in items],
        )
        return Response(StoreAddedSerializer({"ids": ids}).data, status=status.HTTP_201_CREATED)


class StoreSearch(ApiView):
    @extend_schema(operation_id="store_search", summary="Stage 1: records by cosine of their representative "
                   "vector", parameters=[CORPUS], request=StoreSearchSerializer,
                   responses={200: StoreHitSerializer(many=True), **errors(400, 503)}, tags=TAGS)
    def post(self, request: Request, corpus_id: int) -> Response:
        serializer = StoreSearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        hits = store_search(user=request.user, corpus_id=corpus_id, kind=data["kind"], query=data["query"],
                            n_results=data["n_results"], filters=data["filters"])
        return Response(StoreHitSerializer(hits, many=True).data)


class StoreMultiSearch(ApiView):
    @extend_schema(
        operation_id="store_search_multivector",
        summary="Two-stage search: stage 1 on the first query row, then MaxSim re-ranking",
        parameters=[CORPUS],
        request=StoreMultiSearchSerializer,
        responses={200: StoreHitSerializer(many=True), **errors(400, 503)},
        tags=TAGS,
    )
    def post(self, request: Request, corpus_id: int) -> Response:
        serializer = StoreMultiSearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        hits = store_search_multivector(
            user=request.user, corpus_id=corpus_id, kind=data["kind"], query=data["query"],
            n_candidates=data["n_candidates"], n_results=data["n_results"], filters=data["filters"])
        return Response(StoreHitSerializer(hits, many=True).data)


class StoreEmbeddings(ApiView):
    @extend_schema(
        operation_id="store_embeddings",
        summary="A record's full (seq_length, dim) embeddings",
        parameters=[
            CORPUS,
            OpenApiParameter(
                "embedding_id",
                str,
                OpenApiParameter.PATH,
                description="e.g. report-page001 or report-chunk0003.",
            ),
            OpenApiParameter(
                "kind",
                str,
                enum=["visual", "text"],
                description="Collection (default: from the id's -page/-chunk suffix).",
            ),
            OpenApiParameter(
                "encoding",
                str,
                enum=["json", "base64"],
                description="json (default): nested arrays; base64: float32 LE.",
            ),
        ],
        responses={200: EmbeddingsResponseSerializer, **errors(400, 503)},
        tags=TAGS,
    )
    def get(self, request: Request, corpus_id: int, embedding_id: str) -> Response:
        default_kind = "text" if "-chunk" in embedding_id else "visual"
        kind = request.query_params.get("kind", default_kind)
        encoding = request.query_params.get("encoding", "json")
        if encoding not in ("json", "base64"):
            raise ApplicationError(
                f"encoding must be json or base64, got {encoding!r}.", {"encoding": encoding}
            )
        array = np.asarray(store_embeddings_get(user=request.user, corpus_id=corpus_id, kind=kind,
                                                embedding_id=embedding_id), dtype="<f4")
        body = {"id": embedding_id, "kind": kind, "shape": list(array.shape)}
        if encoding == "base64":
            body["base64"] = base64.b64encode(array.tobytes()).decode("ascii")
        else:
            body["embeddings"] = array.tolist()
        return Response(EmbeddingsResponseSerializer(body).data)


class StoreDocuments(ApiView):
    @extend_schema(operation_id="store_documents", summary="Every document with its page and chunk counts",
                   parameters=[CORPUS, *PAGE_PARAMETERS], responses={200: page_of(StoreDocumentSerializer),
                                                                    **errors(503)}, tags=TAGS)
    def get(self, request: Request, corpus_id: int) -> Response:
        documents = store_documents(user=request.user, corpus_id=corpus_id)
        return self.paginated(documents, StoreDocumentSerializer)


class StoreDocument(ApiView):
    @extend_schema(operation_id="store_document_delete", summary="Delete a document's pages and chunks",
                   parameters=[CORPUS, OpenApiParameter("doc_id", str, OpenApiParameter.PATH)],
                   responses={200: StoreDeletedSerializer, **errors(400, 403, 503)}, tags=TAGS)
    def delete(self, request: Request, corpus_id: int, doc_id: str) -> Response:
        pages, chunks = store_document_delete(user=request.user, corpus_id=corpus_id, doc_id=doc_id)
        return Response(StoreDeletedSerializer({"pages": pages, "chunks": chunks}).data)
