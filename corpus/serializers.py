"""The shape of a build as everything outside sees it: the API (`api.views.corpora`), the corpus
page and its live events. One DRF serializer both produces it and is what the OpenAPI schema
documents, so the two cannot differ."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from corpus.models import IndexBuild


class BuildSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    number = serializers.IntegerField(help_text="The build's number within its corpus (#1 is the first).")
    kind = serializers.ChoiceField(
        choices=["build", "append"],
        help_text="A full build (every dataset; also what "
        "merges appends) or an append (new datasets only, searchable in seconds).",
    )
    corpus = serializers.IntegerField(source="corpus_id")
    status = serializers.ChoiceField(choices=["queued", "running", "succeeded", "failed", "cancelled"])
    phase = serializers.CharField(allow_blank=True)
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField(help_text="The whole build's progress, every phase included.")
    rate = serializers.SerializerMethodField(help_text="Items per second in the current phase.")
    error = serializers.CharField(allow_blank=True)
    cancel_requested = serializers.BooleanField()
    documents = serializers.IntegerField(allow_null=True)
    started = serializers.DateTimeField(allow_null=True)
    finished = serializers.DateTimeField(allow_null=True)
    # A build or append succeeds in the transaction that makes it serve: from then on its documents
    # are searchable (until a later full build replaces it, holding them too).
    searchable = serializers.SerializerMethodField(
        help_text="Its documents are searchable (it succeeded and serves).")
    # Read by meaning after it serves (corpus.services.meaning_jobs); searchable by HDC and words before.
    meaning = serializers.SerializerMethodField(help_text=(
        "Its memories read by the meaning channel: status ('' none, pending, running, done, failed), "
        "memories read of all, the encoder's rate (memories/s) and the seconds left at that rate."))

    @extend_schema_field(serializers.FloatField())
    def get_rate(self, build: IndexBuild) -> float:
        return round(build.rate, 1)

    @extend_schema_field(serializers.BooleanField())
    def get_searchable(self, build: IndexBuild) -> bool:
        return build.status == IndexBuild.Status.SUCCEEDED

    @extend_schema_field(serializers.DictField())
    def get_meaning(self, build: IndexBuild) -> dict:
        return {"status": build.meaning, "done": build.meaning_done, "total": build.meaning_total,
                "rate": round(build.meaning_rate, 1) if build.meaning_rate else None,
                "seconds_left": build.meaning_seconds_left, "error": build.meaning_error}
