"""Corpora, their datasets and their builds. Access: `corpus.selectors` (outsiders 404, readers 403)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api.dataset_serializers import (
    DatasetSerializer,
    DatasetUpdateSerializer,
    DatasetUploadedSerializer,
    DatasetUploadSerializer,
)
from api.parsers import PayloadTooLarge
from api.serializers import (
    CorpusSerializer,
    CorpusWriteSerializer,
)
from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path, page_of
from corpus.document_access import (
    corpus_datasets,
    dataset_readers_on_upload,
    dataset_readers_set,
    get_dataset_for_user,
    readers_named,
)
from corpus.models import Corpus, Dataset
from corpus.selectors import (
    corpus_can_manage,
    corpus_list_for_user,
    get_build_for_user,
    get_corpus_for_user,
)
from corpus.serializers import BuildSerializer
from corpus.services.build_liveness import builds_sweep_stale
from corpus.services.builds import build_cancel, build_start, index_after_upload
from corpus.services.corpora import (
    corpus_create,
    corpus_delete,
    corpus_update,
    dataset_discard,
    dataset_set_enabled,
    dataset_upload,
)

CORPUS = id_path("corpus_id", "corpus")
DATASET = id_path("dataset_id", "dataset")
BUILD = id_path("build_id", "build")


def _corpus_json(corpus: Corpus) -> dict:
    return CorpusSerializer(corpus).data


def _managed_corpus(request: Request, corpus_id: int) -> Corpus:
    corpus = get_corpus_for_user(request.user, corpus_id, write=True)
    if not corpus_can_manage(user=request.user, corpus=corpus):
        raise PermissionDenied("Only the owner can change a corpus's settings or delete it.")
    return corpus


class CorpusList(ApiView):
    @extend_schema(operation_id="corpora_list", summary="Corpora you may read", parameters=PAGE_PARAMETERS,
                   responses={200: page_of(CorpusSerializer), **errors()}, tags=["corpora"])
    def get(self, request: Request) -> Response:
        corpora = corpus_list_for_user(request.user).prefetch_related("readable_groups", "writable_groups")
        return self.paginated(corpora, CorpusSerializer)

    @extend_schema(operation_id="corpora_create", summary="Create a corpus (you own it)",
                   request=CorpusWriteSerializer, responses={201: CorpusSerializer, **errors(400, 409)},
                   tags=["corpora"])
    def post(self, request: Request) -> Response:
        serializer = CorpusWriteSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        corpus = corpus_create(owner=request.user, readable_groups=data.pop("readable_groups", []),
                               writable_groups=data.pop("writable_groups", []), **data)
        return Response(_corpus_json(corpus), status=status.HTTP_201_CREATED)


class CorpusDetail(ApiView):
    @extend_schema(operation_id="corpora_get", summary="One corpus", parameters=[CORPUS],
                   responses={200: CorpusSerializer, **errors()}, tags=["corpora"])
    def get(self, request: Request, corpus_id: int) -> Response:
        return Response(_corpus_json(get_corpus_for_user(request.user, corpus_id)))

    @extend_schema(operation_id="corpora_update", summary="Change a corpus's settings (owner; next build)",
                   parameters=[CORPUS], request=CorpusWriteSerializer(partial=True),
                   responses={200: CorpusSerializer, **errors(400, 403, 409)}, tags=["corpora"])
    def patch(self, request: Request, corpus_id: int) -> Response:
        corpus = _managed_corpus(request, corpus_id)
        serializer = CorpusWriteSerializer(
            corpus, data=request.data, partial=True, context={"request": request}
        )
        serializer.is_valid(raise_exception=True)
        corpus = corpus_update(corpus=corpus, **serializer.validated_data)
        return Response(_corpus_json(corpus))

    @extend_schema(
        operation_id="corpora_delete",
        summary="Delete a corpus with its datasets, builds and store (owner)",
        parameters=[CORPUS],
        responses={204: None, **errors(403)},
        tags=["corpora"],
    )
    def delete(self, request: Request, corpus_id: int) -> Response:
        corpus_delete(corpus=_managed_corpus(request, corpus_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _dataset_of(request: Request, corpus_id: int, dataset_id: int, *, write: bool = False) -> Dataset:
    get_corpus_for_user(request.user, corpus_id)
    dataset = get_dataset_for_user(request.user, dataset_id, write=write)
    if dataset.corpus_id != corpus_id:
        raise Http404("No such dataset in this corpus.")
    return dataset


class DatasetList(ApiView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="datasets_list",
        summary="A corpus's datasets, with their memory counts",
        parameters=[CORPUS, *PAGE_PARAMETERS],
        responses={200: page_of(DatasetSerializer), **errors()},
        tags=["datasets"],
    )
    def get(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_for_user(request.user, corpus_id)
        return self.paginated(corpus_datasets(corpus=corpus, user=request.user), DatasetSerializer)

    @extend_schema(
        operation_id="datasets_upload",
        summary="Upload a dataset (multipart field `file`); checked "
        "by content, size-limited (UPLOAD_MAX_BYTES), counted against the uploader's storage quota "
        "(USER_STORAGE_QUOTA_BYTES; past it: 413 quota_exceeded)",
        parameters=[CORPUS],
        request={"multipart/form-data": DatasetUploadSerializer},
        responses={201: DatasetUploadedSerializer, **errors(400, 403, 409, 413)},
        tags=["datasets"],
    )
    def post(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_for_user(request.user, corpus_id, write=True)
        data = request.data  # parses the body, running the upload handler
        # That handler drops a file past the limit while it streams in and says why here.
        refused = getattr(request._request, "upload_errors", {}).get("file")
        if refused:
            raise PayloadTooLarge(refused)
        serializer = DatasetUploadSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        given = serializer.validated_data
        # Named readers are checked before the file is stored: a wrong name stores nothing.
        users, groups = readers_named(users=given.get("reader_users", "").split(","),
                                      groups=given.get("reader_groups", "").split(","))
        dataset = dataset_upload(corpus=corpus, user=request.user, uploaded_file=given["file"],
                                 replace=given["replace"])
        dataset = dataset_readers_on_upload(dataset=dataset, users=users, groups=groups)
        dataset.memory_count = 0
        job = index_after_upload(corpus=corpus, user=request.user)
        if job is not None:
            job.refresh_from_db()
        dataset.index_job = job
        return Response(DatasetUploadedSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetail(ApiView):
    @extend_schema(operation_id="datasets_get", summary="One dataset", parameters=[CORPUS, DATASET],
                   responses={200: DatasetSerializer, **errors()}, tags=["datasets"])
    def get(self, request: Request, corpus_id: int, dataset_id: int) -> Response:
        return Response(DatasetSerializer(_dataset_of(request, corpus_id, dataset_id)).data)

    @extend_schema(operation_id="datasets_update", summary="Enable or disable a dataset for search, or set "
                   "its own readers (at once, no rebuild)", parameters=[CORPUS, DATASET],
                   request=DatasetUpdateSerializer,
                   responses={200: DatasetSerializer, **errors(400, 403)}, tags=["datasets"])
    def patch(self, request: Request, corpus_id: int, dataset_id: int) -> Response:
        dataset = _dataset_of(request, corpus_id, dataset_id, write=True)
        serializer = DatasetUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        given = serializer.validated_data
        if "readers" in given:
            users, groups = readers_named(users=given["readers"]["users"], groups=given["readers"]["groups"])
            dataset = dataset_readers_set(dataset=dataset, users=users, groups=groups)
        if "enabled" in given:
            dataset = dataset_set_enabled(dataset=dataset, enabled=given["enabled"])
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(
        operation_id="datasets_delete",
        summary="Delete a dataset (searches drop its memories at once)",
        parameters=[CORPUS, DATASET],
        responses={204: None, **errors(403)},
        tags=["datasets"],
    )
    def delete(self, request: Request, corpus_id: int, dataset_id: int) -> Response:
        dataset_discard(dataset=_dataset_of(request, corpus_id, dataset_id, write=True))
        return Response(status=status.HTTP_204_NO_CONTENT)


class BuildList(ApiView):
    @extend_schema(
        operation_id="builds_list",
        summary="A corpus's builds, newest first",
        parameters=[CORPUS, *PAGE_PARAMETERS],
        responses={200: page_of(BuildSerializer), **errors()},
        tags=["builds"],
    )
    def get(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_for_user(request.user, corpus_id)
        builds_sweep_stale(corpus_id=corpus.pk)
        return self.paginated(corpus.builds.order_by("-created", "-id"), BuildSerializer)

    @extend_schema(operation_id="builds_start", summary="Start a build (queued; poll builds/{id}/)",
                   parameters=[CORPUS], request=None,
                   responses={202: BuildSerializer, **errors(400, 403, 409)}, tags=["builds"])
    def post(self, request: Request, corpus_id: int) -> Response:
        corpus = get_corpus_for_user(request.user, corpus_id, write=True)
        build = build_start(corpus=corpus, user=request.user)
        build.refresh_from_db()
        return Response(BuildSerializer(build).data, status=status.HTTP_202_ACCEPTED)


class BuildDetail(ApiView):
    @extend_schema(operation_id="builds_get", summary="A build's status, phase, progress and error",
                   parameters=[BUILD], responses={200: BuildSerializer, **errors()}, tags=["builds"])
    def get(self, request: Request, build_id: int) -> Response:
        return Response(BuildSerializer(get_build_for_user(request.user, build_id)).data)


class BuildCancel(ApiView):
    @extend_schema(operation_id="builds_cancel", summary="Cancel a queued (at once) or running build (at its "
                   "next batch)", parameters=[BUILD], request=None,
                   responses={202: BuildSerializer, **errors(403, 409)}, tags=["builds"])
    def post(self, request: Request, build_id: int) -> Response:
        build = build_cancel(build=get_build_for_user(request.user, build_id, write=True))
        return Response(BuildSerializer(build).data, status=status.HTTP_202_ACCEPTED)
