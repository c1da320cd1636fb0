"""A source of documents kept in sync with a corpus, and the documents it holds there.

Registered by the corpus app (gathered by `corpus.models`). Each document of a source
is one dataset of the corpus, keyed by (source, path); `SourceDocument` remembers which dataset
serves the path and what the source said about it (content hash, ETag, Last-Modified, commit), so a
sync reads again only what changed.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from corpus.models.corpora import Corpus, Dataset


class Source(models.Model):
    class Kind(models.TextChoices):
        FOLDER = "folder", "Folder on the server"
        GIT = "git", "Git repository"
        WEB = "web", "Web site"
        S3 = "s3", "S3-compatible prefix"

    class Status(models.TextChoices):
        IDLE = "idle", "Never synced"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Syncing"
        SUCCEEDED = "succeeded", "Synced"
        FAILED = "failed", "Failed"
        CONFIRM = "confirm", "Waiting for confirmation"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="sources")
    name = models.CharField(max_length=100, help_text="Prefixes the names of its documents in the corpus.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    location = models.CharField(
        max_length=1000, help_text="Folder: a path under SOURCE_ROOTS. Git: the repository's https URL. "
                                   "Web: the start URL. S3: s3://BUCKET/PREFIX.")
    branch = models.CharField(max_length=200, blank=True, help_text="Git: the branch (blank: main).")
    # Write-only: never serialized, shown or logged (the API and the pages only say whether one is set).
    token = models.CharField(max_length=1000, blank=True, help_text="Git: an access token. S3: KEY:SECRET.")
    endpoint_url = models.CharField(max_length=500, blank=True, help_text="S3: the endpoint (blank: AWS).")
    path_prefix = models.CharField(
        max_length=500,
        blank=True,
        help_text="Web: only pages under this path (blank: the start URL's folder).",
    )
    sitemap_url = models.CharField(
        max_length=1000, blank=True, help_text="Web: read pages from this sitemap."
    )
    max_pages = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(1), MaxValueValidator(100000)]
    )
    max_depth = models.PositiveSmallIntegerField(default=5, validators=[MaxValueValidator(50)])
    include = models.TextField(
        blank=True, help_text="Glob patterns, one a line, that a path must match (blank: all)."
    )
    exclude = models.TextField(blank=True, help_text="Glob patterns, one a line, of paths to leave out.")
    # Who may read each document, by its path (corpus.sources.readers): [{"pattern", "groups"}], the
    # first pattern that matches wins; none matching (or no rules): the corpus's readers.
    reader_rules = models.JSONField(default=list, blank=True, help_text=(
        'Ordered rules [{"pattern": "hr/**", "groups": ["hr"]}]: the first whose glob matches a '
        "document's path gives its readers."))
    posix_groups = models.BooleanField(default=False, help_text=(
        "Folder: a file's POSIX group is the portal group of the same name that may read it."))
    interval_minutes = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(527040)],
        help_text="Sync every this many minutes (0: only on demand).",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    # The last (or running) sync: what the corpus page shows.
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    sync_started = models.DateTimeField(null=True, blank=True)
    sync_finished = models.DateTimeField(null=True, blank=True)
    sync_seconds = models.FloatField(null=True, blank=True)
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    removed = models.PositiveIntegerField(default=0)
    failures = models.JSONField(default=list, blank=True, help_text="[{name, reason}] of documents skipped.")
    error = models.TextField(blank=True, help_text="Why the last sync failed or stopped.")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    cursor = models.JSONField(default=dict, blank=True, help_text="What the last sync saw (a Git commit).")

    class Meta:
        app_label = "corpus"
        ordering = ["corpus", "name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["corpus", "name"], name="source_unique_name_per_corpus")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @property
    def percent(self) -> int:
        return min(99, int(100 * self.done / self.total)) if self.total and self.is_active else 0


class SourceDocument(models.Model):
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="documents")
    path = models.CharField(max_length=1000)
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="source_documents")
    sha256 = models.CharField(max_length=64)
    version = models.JSONField(
        default=dict, blank=True, help_text="ETag, Last-Modified, blob or size and mtime."
    )
    url = models.CharField(max_length=2000, blank=True, help_text="The document at its source.")

    class Meta:
        app_label = "corpus"
        ordering = ["source", "path"]
        constraints = [models.UniqueConstraint(fields=["source", "path"], name="sourcedocument_unique_path")]

    def __str__(self) -> str:
        return self.path
