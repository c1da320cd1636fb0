"""The shape of a source as everything outside sees it: the API (`api.views.sources`), the corpus
page's polling and its live events. One DRF serializer reads the `Source` row, produces that shape
and is what the OpenAPI schema documents, so they cannot differ. The token is never in it: only
whether one is set."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from corpus.sources.models import Source


class SourceFailureSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The document's path at the source.")
    reason = serializers.CharField()


class SourceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    corpus = serializers.IntegerField(source="corpus_id")
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Source.Kind.choices)
    location = serializers.CharField()
    branch = serializers.CharField()
    has_token = serializers.SerializerMethodField(
        help_text="Whether a token is set (the token itself is never shown).")
    interval_minutes = serializers.IntegerField(
        help_text="Synced every this many minutes (0: on demand only)."
    )
    reader_rules = serializers.JSONField(help_text=(
        'Who reads each document, by its path: [{"pattern": "hr/**", "groups": ["hr"]}], the first match '
        "wins; a document no rule names is read by the corpus's readers."))
    posix_groups = serializers.BooleanField(
        help_text="Folder: a file's POSIX group is the portal group that reads it.")
    documents = serializers.IntegerField(
        source="documents.count", help_text="Documents of the source the corpus holds."
    )
    status = serializers.ChoiceField(choices=Source.Status.choices, help_text=(
        "The last sync: `confirm` when it stopped before removing more than half of the documents "
        "(sync again with `confirm: true`)."))
    error = serializers.CharField(help_text="Why the last sync failed or stopped.")
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField()
    added = serializers.IntegerField()
    changed = serializers.IntegerField()
    removed = serializers.IntegerField()
    failed = serializers.SerializerMethodField(
        help_text="Documents that could not be read or stored (kept as they were).")
    failures = SourceFailureSerializer(many=True)
    sync_started = serializers.DateTimeField(allow_null=True)
    sync_finished = serializers.DateTimeField(allow_null=True)
    sync_seconds = serializers.FloatField(allow_null=True)

    @extend_schema_field(serializers.BooleanField())
    def get_has_token(self, source: Source) -> bool:
        return bool(source.token)

    @extend_schema_field(serializers.IntegerField())
    def get_failed(self, source: Source) -> int:
        return len(source.failures or [])
