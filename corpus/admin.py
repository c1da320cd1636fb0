"""Corpus management for staff. Writes go through the same services as the portal pages."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.html import format_html

from core.errors import ApplicationError
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.services.builds import build_cancel, build_start
from corpus.services.corpora import dataset_set_enabled, dataset_upload
from corpus.services.multivector import StoreUnavailable, store_collection_stats
from corpus.templatetags.portal import num, rate, seconds


@admin.register(Corpus)
class CorpusAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "visibility", "active_build", "hdc_dimensions", "updated"]
    list_filter = ["visibility"]
    search_fields = ["name", "description", "owner__username"]
    filter_horizontal = ["readable_groups", "writable_groups", "readable_users", "writable_users"]
    raw_id_fields = ["owner"]
    readonly_fields = ["active_build", "created", "updated"]
    actions = ["start_builds"]

    def get_readonly_fields(self, request: HttpRequest, obj: Corpus | None = None) -> list[str]:
        # Deleting (single or bulk) drops the store too: see corpus.signals.
        return [*self.readonly_fields, "multivector_store"] if obj is not None else self.readonly_fields

    @admin.display(description="multi-vector store")
    def multivector_store(self, corpus: Corpus) -> str:
        try:
            stats = store_collection_stats(corpus_id=corpus.pk)
        except StoreUnavailable as error:
            return error.message
        if stats.empty:
            return "No embeddings yet."
        return (f"{stats.total_documents:,} documents: {stats.visual_count:,} visual records (pages), "
                f"{stats.text_count:,} text records (chunks), about {stats.storage_size_mb:,.1f} MB")

    @admin.action(description="Start an index build")
    def start_builds(self, request: HttpRequest, queryset: QuerySet[Corpus]) -> None:
        for corpus in queryset:
            try:
                build = build_start(corpus=corpus, user=request.user)
            except ApplicationError as error:
                self.message_user(request, f"{corpus}: {error.message}", messages.ERROR)
            else:
                self.message_user(request, f"{corpus}: build {build.pk} queued.", messages.SUCCESS)


class DatasetAddForm(forms.ModelForm):
    """Upload through `dataset_upload`: the same content validation as the portal page."""

    upload = forms.FileField()

    class Meta:
        model = Dataset
        fields = ["corpus", "enabled"]

    def __init__(self, *args, request: HttpRequest | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request = request
        self.created: Dataset | None = None

    def clean(self) -> dict:
        cleaned = super().clean()
        errors = getattr(self.request, "upload_errors", {})
        if "upload" in errors:
            raise forms.ValidationError(errors["upload"])
        corpus, upload = cleaned.get("corpus"), cleaned.get("upload")
        if corpus is not None and upload is not None:
            try:
                self.created = dataset_upload(corpus=corpus, user=self.request.user, uploaded_file=upload)
            except ApplicationError as error:
                raise forms.ValidationError(error.message) from None
            if not cleaned.get("enabled", True):
                dataset_set_enabled(dataset=self.created, enabled=False)
        return cleaned


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "corpus",
        "format",
        "file_size",
        "records",
        "enabled",
        "uploaded_by",
        "uploaded_at",
    ]
    list_filter = ["enabled", "format"]
    search_fields = ["name", "sha256", "corpus__name"]
    readonly_fields = [
        "corpus",
        "name",
        "file",
        "size",
        "sha256",
        "format",
        "record_count",
        "record_count_exact",
        "uploaded_by",
        "uploaded_at",
    ]
    actions = ["enable", "disable"]

    @admin.display(description="size", ordering="size")
    def file_size(self, dataset: Dataset) -> str:
        return filesizeformat(dataset.size)

    @admin.display(description="records", ordering="record_count")
    def records(self, dataset: Dataset) -> str:
        return num(dataset.record_count) if dataset.record_count_exact else f"≈ {num(dataset.record_count)}"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs.update(form=DatasetAddForm, fields=["corpus", "upload", "enabled"])
            form = super().get_form(request, obj, change=change, **kwargs)

            class BoundAddForm(form):
                def __init__(self, *args, **inner) -> None:
                    super().__init__(*args, request=request, **inner)

            return BoundAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Dataset | None = None) -> list[str]:
        return self.readonly_fields if obj is not None else []

    def save_form(self, request, form, change):
        if not change:
            return form.created
        return super().save_form(request, form, change)

    def save_model(self, request, obj, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    @admin.action(description="Enable for search")
    def enable(self, request: HttpRequest, queryset: QuerySet[Dataset]) -> None:
        for dataset in queryset:
            dataset_set_enabled(dataset=dataset, enabled=True)
        self.message_user(request, f"{queryset.count()} datasets enabled.", messages.SUCCESS)

    @admin.action(description="Disable for search")
    def disable(self, request: HttpRequest, queryset: QuerySet[Dataset]) -> None:
        for dataset in queryset:
            dataset_set_enabled(dataset=dataset, enabled=False)
        self.message_user(request, f"{queryset.count()} datasets disabled.", messages.SUCCESS)


@admin.register(IndexBuild)
class IndexBuildAdmin(admin.ModelAdmin):
    # Few, short columns: the list must fit 1280 px beside the admin's sidebar.
    list_display = ["id", "corpus", "status", "progress", "memories", "queued", "took", "short_error"]
    list_select_related = ["corpus"]
    list_filter = ["status"]
    search_fields = ["corpus__name", "error"]
    exclude = ["rate"]
    readonly_fields = [f.name for f in IndexBuild._meta.fields if f.name != "rate"] + ["speed"]
    actions = ["cancel"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="progress")
    def progress(self, build: IndexBuild) -> str:
        phase = f" {build.phase.replace('_', ' ')}" if build.is_active and build.phase else ""
        return format_html(
            '<progress max="100" value="{}"></progress> {} %{}', build.percent, build.percent, phase
        )

    @admin.display(description="memories", ordering="documents")
    def memories(self, build: IndexBuild) -> str:
        return num(build.documents)

    @admin.display(description="queued", ordering="created")
    def queued(self, build: IndexBuild) -> str:
        return timezone.localtime(build.created).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="took")
    def took(self, build: IndexBuild) -> str:
        return (
            seconds((build.finished - build.started).total_seconds())
            if build.finished and build.started
            else ""
        )

    @admin.display(description="rate")
    def speed(self, build: IndexBuild) -> str:
        return f"{rate(build.rate)} ({build.phase.replace('_', ' ')})" if build.rate else ""

    @admin.display(description="error")
    def short_error(self, build: IndexBuild) -> str:
        return build.error if len(build.error) <= 60 else build.error[:59] + "…"

    @admin.action(description="Cancel build")
    def cancel(self, request: HttpRequest, queryset: QuerySet[IndexBuild]) -> None:
        for build in queryset:
            try:
                build_cancel(build=build)
            except ApplicationError as error:
                self.message_user(request, error.message, messages.WARNING)
            else:
                self.message_user(request, f"Build {build.pk}: cancellation requested.", messages.SUCCESS)
