"""A corpus's sources: create, list, sync, delete. Only the corpus's owner and staff (superusers)
manage them (`corpus.sources.selectors`: outsiders 404, the corpus's other readers 403). A
source's token is write-only: no response carries it, only `has_token`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path, page_of
from corpus.sources.models import Source
from corpus.sources.readers import source_readers_update
from corpus.sources.selectors import corpus_sources, get_corpus_sources_for_user, get_source_for_user
from corpus.sources.serializers import SourceSerializer
from corpus.sources.services import SOURCE_FIELDS, source_create, source_delete, source_sync_start

CORPUS = id_path("corpus_id", "corpus")
SOURCE = id_path("source_id", "source")


class SourceCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=Source.Kind.choices)
    location = serializers.CharField(max_length=1000, help_text=(
        "folder: a path under SOURCE_ROOTS; git: the repository's https URL; web: the start URL; "
        "s3: s3://BUCKET/PREFIX."))
    branch = serializers.CharField(
        max_length=200, required=False, help_text="git: the branch (default main)."
    )
    token = serializers.CharField(max_length=1000, required=False, write_only=True, trim_whitespace=False,
                                  help_text="git: an access token; s3: KEY:SECRET. Write-only.")
    endpoint_url = serializers.CharField(max_length=500, required=False, help_text="s3: the endpoint URL.")
    path_prefix = serializers.CharField(
        max_length=500,
        required=False,
        help_text="web: only pages under this path (default: the start URL's folder).",
    )
    sitemap_url = serializers.CharField(
        max_length=1000, required=False, help_text="web: a sitemap to read pages from."
    )
    max_pages = serializers.IntegerField(
        min_value=1, max_value=100000, required=False, help_text="web: page cap."
    )
    max_depth = serializers.IntegerField(
        min_value=0, max_value=50, required=False, help_text="web: link depth cap."
    )
    include = serializers.CharField(required=False, help_text="Glob patterns (one a line) a path must match.")
    exclude = serializers.CharField(
        required=False, help_text="Glob patterns (one a line) of paths to leave out."
    )
    interval_minutes = serializers.IntegerField(min_value=0, max_value=527040, required=False,
                                                help_text="Sync every this many minutes (0: on demand only).")
    reader_rules = serializers.JSONField(required=False, help_text=(
        'Ordered rules [{"pattern": "hr/**", "groups": ["hr"]}]: the first whose glob matches a '
        "document's path "
        "names the groups that alone read it; none matching: the corpus's readers."))
    posix_groups = serializers.BooleanField(required=False, help_text=(
        "folder: a file's POSIX group is the portal group of the same name that reads it (after the rules)."))


class SourceReadersSerializer(serializers.Serializer):
    reader_rules = serializers.JSONField(required=False, help_text="The new rules (replacing the old ones).")
    posix_groups = serializers.BooleanField(required=False, help_text="folder: read a file's POSIX group.")


class SourceSyncSerializer(serializers.Serializer):
    confirm = serializers.BooleanField(default=False, help_text=(
        "Go on even when the sync removes more than half of the source's documents."))


class SourceList(ApiView):
    @extend_schema(
        operation_id="sources_list",
        summary="A corpus's sources with their last sync (owner)",
        parameters=[CORPUS, *PAGE_PARAMETERS],
        responses={200: page_of(SourceSerializer), **errors(403)},
        tags=["sources"],
    )
    def get(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_sources_for_user(request.user, corpus_id)
        return self.paginated(corpus_sources(corpus=corpus), SourceSerializer)

    @extend_schema(
        operation_id="sources_create",
        summary="Add a source to a corpus (owner); sync it to read it",
        parameters=[CORPUS],
        request=SourceCreateSerializer,
        responses={201: SourceSerializer, **errors(400, 403, 409)},
        tags=["sources"],
    )
    def post(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_sources_for_user(request.user, corpus_id)
        serializer = SourceCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        options = {key: data.pop(key) for key in SOURCE_FIELDS if key in data}
        source = source_create(corpus=corpus, user=request.user, **data, **options)
        return Response(SourceSerializer(source).data, status=status.HTTP_201_CREATED)


class SourceDetail(ApiView):
    @extend_schema(
        operation_id="sources_get",
        summary="One source and its last sync (owner)",
        parameters=[SOURCE],
        responses={200: SourceSerializer, **errors(403)},
        tags=["sources"],
    )
    def get(self, request: Request, source_id: int) -> Response:
        return Response(SourceSerializer(get_source_for_user(request.user, source_id)).data)

    @extend_schema(
        operation_id="sources_readers",
        summary="Change who reads the source's documents (owner): every document gets its readers again at "
        "once, no rebuild",
        parameters=[SOURCE],
        request=SourceReadersSerializer,
        responses={200: SourceSerializer, **errors(400, 403)},
        tags=["sources"],
    )
    def patch(self, request: Request, source_id: int) -> Response:
        source = get_source_for_user(request.user, source_id)
        serializer = SourceReadersSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        source = source_readers_update(source=source, **serializer.validated_data)
        return Response(SourceSerializer(source).data)

    @extend_schema(
        operation_id="sources_delete",
        summary="Delete a source and its documents from the corpus (owner)",
        parameters=[SOURCE],
        responses={204: None, **errors(403, 409)},
        tags=["sources"],
    )
    def delete(self, request: Request, source_id: int) -> Response:
        source_delete(source=get_source_for_user(request.user, source_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SourceSync(ApiView):
    @extend_schema(operation_id="sources_sync", summary="Queue a sync of the source (owner); poll the source "
                   "until its status is no longer queued or running", parameters=[SOURCE],
                   request=SourceSyncSerializer, responses={202: SourceSerializer, **errors(403, 409)},
                   tags=["sources"])
    def post(self, request: Request, source_id: int) -> Response:
        source = get_source_for_user(request.user, source_id)
        serializer = SourceSyncSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        source = source_sync_start(source=source, confirm=serializer.validated_data["confirm"])
        return Response(SourceSerializer(source).data, status=status.HTTP_202_ACCEPTED)
