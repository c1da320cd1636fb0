"""The API's shapes of a corpus's datasets (documents): listed, uploaded, changed, with their own
readers (`corpus.document_access`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from corpus.document_access import dataset_readers
from corpus.serializers import BuildSerializer


class ReadersSerializer(serializers.Serializer):
    users = serializers.ListField(
        child=serializers.CharField(max_length=150),
        max_length=1000,
        default=list,
        help_text="Usernames of the people who may read the document.",
    )
    groups = serializers.ListField(
        child=serializers.CharField(max_length=150),
        max_length=1000,
        default=list,
        help_text="Names of the groups whose members may read it.",
    )


class DatasetSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    corpus = serializers.IntegerField(source="corpus_id")
    name = serializers.CharField()
    size = serializers.IntegerField(help_text="Bytes.")
    sha256 = serializers.CharField()
    format = serializers.CharField()
    record_count = serializers.IntegerField()
    record_count_exact = serializers.BooleanField()
    enabled = serializers.BooleanField()
    uploaded_at = serializers.DateTimeField()
    memory_count = serializers.IntegerField(required=False, help_text="Memories of the active build from it.")
    readers = serializers.SerializerMethodField(
        help_text=(
            "The document's own readers, narrower than the corpus's; both lists empty: the corpus's readers "
            "(unless `restricted`)."
        )
    )
    restricted = serializers.BooleanField(
        help_text=(
            "Whether the document is closed to the corpus's other readers. True with both reader lists "
            "empty: its reader groups were deleted and only the corpus's owner, writers and superusers "
            "read it."
        )
    )

    @extend_schema_field(ReadersSerializer)
    def get_readers(self, dataset: Any) -> dict[str, list[str]]:
        return dataset_readers(dataset)


class DatasetUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="A document (PDF, office, OpenDocument, EPUB, CSV/TSV, e-mail, image, code, Markdown, "
                  "text, HTML, XML) or records (JSON, JSONL, Parquet)."
    )
    replace = serializers.BooleanField(
        default=False,
        help_text=(
            "Replace the corpus's dataset of the same name: the old one serves until the new one is indexed, "
            "then leaves searches in the same step."
        ),
    )
    reader_users = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=10000,
        help_text=(
            "Comma-separated usernames who alone (with `reader_groups`) may read the document; blank: the "
            "corpus's "
            "readers."
        ),
    )
    reader_groups = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=10000,
        help_text=("Comma-separated names of the groups whose members may read the document."),
    )


class DatasetUpdateSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(
        required=False, help_text="Disabled datasets are left out of searches at once."
    )
    readers = ReadersSerializer(
        required=False,
        help_text=(
            "Replace the document's own readers (both lists empty: the corpus's readers again); effective at "
            "the "
            "next search, no rebuild."
        ),
    )

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError("Give `enabled`, `readers` or both.")
        return attrs


class DatasetUploadedSerializer(DatasetSerializer):
    index_job = BuildSerializer(
        allow_null=True,
        help_text=(
            "The job that makes the upload searchable without a click (its first build, or an append): poll "
            "`GET /api/v1/builds/{id}/` until `searchable`. Null when the corpus does not index uploads at "
            "once, or "
            "when another job of the corpus runs: its end queues the append."
        ),
    )
