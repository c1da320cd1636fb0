"""Corpora, their uploaded datasets, and the index builds that make them searchable."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Max, Q

from corpus.build_parameters import BuildParameters
from corpus.corpus_settings import model_field
from corpus.files import data_storage
from engine.readers import readers as document_readers

# How pages name a dataset's format (engine.datasets.FORMATS); the document readers name their own.
FORMAT_LABELS = {
    "pdf": "PDF",
    "docx": "Word",
    "markdown": "Markdown",
    "text": "text",
    "html": "HTML",
    "xml": "XML",
    "json": "JSON",
    "jsonl": "JSONL",
    "parquet": "Parquet",
    **{reader.name: reader.label for reader in document_readers() if reader.label},
}


class Corpus(models.Model):
    class Visibility(models.TextChoices):
        PRIVATE = "private", "Private: only the owner"
        GROUPS = "groups", "Shared: the people and groups it is shared with"
        EVERYONE = "everyone", "Everyone with an account may read"

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="corpora")
    visibility = models.CharField(max_length=16, choices=Visibility.choices, default=Visibility.PRIVATE)
    readable_groups = models.ManyToManyField(Group, blank=True, related_name="readable_corpora",
                                             help_text="May search and view (visibility 'groups').")
    writable_groups = models.ManyToManyField(Group, blank=True, related_name="writable_corpora",
                                             help_text="May also upload datasets and start builds.")
    readable_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="readable_corpora",
        help_text="People who may search and view (visibility 'shared').",
    )
    writable_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="writable_corpora",
        help_text="People who may also upload datasets and start builds.",
    )
    # The settings are declared in corpus.corpus_settings; each column is made from its declaration.
    hdc_dimensions = model_field("hdc_dimensions")
    hdc_seed = model_field("hdc_seed")
    hdc_ngram = model_field("hdc_ngram")
    chunk_size = model_field("chunk_size")
    gguf_path = model_field("gguf_path")
    late_interaction = model_field("late_interaction")
    meaning_channel = model_field("meaning_channel")
    append_on_upload = model_field("append_on_upload")
    active_build = models.ForeignKey(
        "IndexBuild",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The build searches use; switched atomically.",
    )
    # The corpus's searchable state is the active (full) build plus these append segments, oldest
    # first (docs/segments.md); both fields change together, in one UPDATE of this row.
    active_appends = models.JSONField(
        default=list, blank=True, help_text="Ids of the append segments searched on top of the active build."
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        verbose_name_plural = "corpora"
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="corpus_unique_name_per_owner")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("corpus:detail", args=[self.pk])

    @property
    def serving_build_ids(self) -> list[int]:
        """The segments of the searchable state, base first: the active build, then its appends
        (docs/segments.md); [] before the first build."""
        if self.active_build_id is None:
            return []
        return [self.active_build_id, *[int(i) for i in self.active_appends or []]]


class Dataset(models.Model):
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=255)
    file = models.FileField(storage=data_storage, max_length=500)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    format = models.CharField(max_length=16)
    record_count = models.PositiveIntegerField(default=0)
    record_count_exact = models.BooleanField(default=False,
                                             help_text="False: estimated at upload; exact after a build.")
    enabled = models.BooleanField(default=True, help_text="Disabled datasets are left out of searches.")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    uploaded_at = models.DateTimeField(auto_now_add=True)
    # A newer version of a dataset (a sync's changed document, an upload under the same name): the
    # old one serves until the job that indexes this one activates, which deletes it in the same
    # transaction, so no search sees both or neither (corpus.services.corpora.datasets_retire_replaced).
    replaces = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaced_by"
    )
    # The document's own readers, narrower than its corpus's (corpus.document_access): none means
    # the corpus's readers. `restricted` says whether any is set, so that a search of a corpus
    # without document readers reads nothing more (kept by `corpus.document_access.readers_changed`).
    reader_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="readable_datasets",
        help_text="People who may read this document (none: the corpus's readers).")
    reader_groups = models.ManyToManyField(Group, blank=True, related_name="readable_datasets",
                                           help_text="Groups whose members may read this document.")
    restricted = models.BooleanField(default=False, editable=False,
                                     help_text="Whether the document has readers of its own.")

    class Meta:
        ordering = ["corpus", "name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["corpus", "sha256"], name="dataset_unique_content_per_corpus")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def format_label(self) -> str:
        return FORMAT_LABELS.get(self.format, self.format)


# The phases of a build in the order they run, with their usual share (%) of its time (the worker's
# own timings of demo and bench.build corpora), so that one progress bar covers the whole build. The
# late-interaction fill ("text_store") and the exact-word index ("words") are alternatives; the
# meaning rows ("meaning") follow the words in an append that reads them (`_with_meaning`).
BUILD_PHASE_SHARES = {"starting": 1, "tokenizer": 3, "tokenize": 27, "embeddings": 4, "vocabulary": 6,
                      "encode": 40, "verify": 3, "activate": 3, "text_store": 10, "words": 10,
                      "publish": 2}
# An append's phases (engine.segments.append_segment): no embedding table to load, a small
# vocabulary extension, and the word index written beside the rows.
APPEND_PHASE_SHARES = {"starting": 2, "tokenizer": 10, "tokenize": 25, "vocabulary": 10, "encode": 35,
                       "words": 5, "verify": 5, "activate": 8, "publish": 4}
# An append with the meaning channel (`engine.meaning`) reads its own memories before it serves: its
# encoder takes most of the time (tens of memories a second against HDC's ~1,000); the other phases
# share the rest, in proportion. A full build serves first and is read by meaning afterwards.
MEANING_SHARE = 90


def _with_meaning(shares: dict[str, int]) -> dict[str, float]:
    rest = (100 - MEANING_SHARE) / sum(shares.values())
    out: dict[str, float] = {}
    for phase, share in shares.items():
        out[phase] = share * rest
        if phase == "words":
            out["meaning"] = MEANING_SHARE
    return out


class IndexBuild(models.Model):
    class Kind(models.TextChoices):
        BUILD = "build", "Build"
        APPEND = "append", "Append"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class Meaning(models.TextChoices):
        NONE = "", "No meaning rows"
        PENDING = "pending", "Waiting to be read by meaning"
        RUNNING = "running", "Being read by meaning"
        DONE = "done", "Read by meaning"
        FAILED = "failed", "Reading by meaning failed"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="builds")
    number = models.PositiveIntegerField(null=True, blank=True, editable=False,
                                         help_text="The build's number within its corpus (#1 is the first).")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.BUILD,
                            help_text="A full build (all datasets, fresh statistics) or an append segment "
                                      "(new datasets only, on the active build's statistics).")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    phase = models.CharField(max_length=32, blank=True)
    done = models.BigIntegerField(default=0)
    total = models.BigIntegerField(default=0)
    rate = models.FloatField(default=0.0, help_text="Items per second in the current phase.")
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    heartbeat = models.DateTimeField(null=True, blank=True,
                                     help_text="Last sign of life of the worker running this build.")
    worker = models.CharField(
        max_length=300,
        blank=True,
        help_text="The process running this build: host:pid:start time (see builds.owner_alive).",
    )
    # BuildParameters.to_json(); read through `params`.
    parameters = models.JSONField(
        default=dict, blank=True, help_text="HDC settings and model the build used."
    )
    timings = models.JSONField(default=dict, blank=True)
    build_dir = models.CharField(max_length=500, blank=True)
    documents = models.PositiveIntegerField(null=True, blank=True)
    duplicates = models.PositiveIntegerField(null=True, blank=True)
    vocab_size = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # The meaning rows of this build's or segment's memories, read after it serves
    # (corpus.services.meaning_jobs; an append whose state had them reads its own before it serves).
    meaning = models.CharField(max_length=16, choices=Meaning.choices, blank=True, default=Meaning.NONE)
    meaning_done = models.BigIntegerField(default=0, help_text="Memories read by meaning so far.")
    meaning_total = models.BigIntegerField(default=0)
    meaning_seconds = models.FloatField(default=0.0, help_text="The encoder's time on this build's memories.")
    meaning_heartbeat = models.DateTimeField(null=True, blank=True,
                                             help_text="Last sign of life of the task reading it by meaning.")
    meaning_worker = models.CharField(max_length=300, blank=True,
                                      help_text="The process reading it by meaning (as `worker`).")
    meaning_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            # The database, not only the service, refuses a second concurrent build of a corpus.
            models.UniqueConstraint(fields=["corpus"], condition=Q(status__in=["queued", "running"]),
                                    name="indexbuild_one_active_per_corpus"),
            models.UniqueConstraint(fields=["corpus", "number"], name="indexbuild_unique_number_per_corpus"),
        ]

    def __str__(self) -> str:
        return f"Build #{self.number or '?'} of {self.corpus} ({self.get_status_display().lower()})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.number is None and self.corpus_id is not None:
            # Numbered per corpus: a corpus's first build is #1. Builds of one corpus are created one
            # at a time (one queued or running at once), and (corpus, number) is unique.
            last = IndexBuild.objects.filter(corpus_id=self.corpus_id).aggregate(last=Max("number"))["last"]
            self.number = (last or 0) + 1
        super().save(*args, **kwargs)

    @property
    def params(self) -> BuildParameters:
        """`parameters` as a BuildParameters (any stored shape, old rows included)."""
        return BuildParameters.from_json(self.parameters)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @property
    def meaning_rate(self) -> float:
        """Memories a second the meaning channel's encoder read of this build (0: none yet)."""
        return self.meaning_done / self.meaning_seconds if self.meaning_seconds > 0 else 0.0

    @property
    def meaning_seconds_left(self) -> int | None:
        """Seconds until its memories are read by meaning, at the rate so far (None: no rate yet)."""
        if self.meaning == self.Meaning.DONE:
            return 0
        rate = self.meaning_rate
        if self.meaning != self.Meaning.RUNNING or not rate:
            return None
        return round(max(0, self.meaning_total - self.meaning_done) / rate)

    @property
    def percent(self) -> int:
        """The whole build's progress (one bar for every phase): the phases before the current one,
        by their usual share of a build's time, plus the current phase's own done/total."""
        if self.status == self.Status.SUCCEEDED:
            return 100
        shares = APPEND_PHASE_SHARES if self.kind == self.Kind.APPEND else BUILD_PHASE_SHARES
        if self.kind == self.Kind.APPEND and self.params.meaning_channel:
            shares = _with_meaning(shares)  # a full build reads by meaning after it serves
        if self.phase not in shares:
            return 0
        before = 0
        for phase, share in shares.items():
            if phase == self.phase:
                within = min(1.0, self.done / self.total) if self.total else 0.0
                return min(99, int(before + share * within))
            before += share
        return 0


class Memory(models.Model):
    """One row of a build's bitmap index (`hdv_idx`), with its text and where it came from: a build
    artefact, written by the build (`corpus.memory_rows.MemoryWriter`), searched by the memory app."""

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="memories")
    build = models.ForeignKey(IndexBuild, on_delete=models.CASCADE, related_name="memories")
    hdv_idx = models.PositiveIntegerField(help_text="Row in the build's bitmap index.")
    content_hash = models.CharField(max_length=32, help_text="blake2b-128 of the text (engine content id).")
    text = models.TextField()
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="memories")
    metadata = models.JSONField(default=dict, blank=True)
    token_count = models.PositiveIntegerField(default=0)

    class Meta:
        # The table and index names it was created with in the memory app (memory/migrations/0001).
        db_table = "memory_memory"
        ordering = ["build", "hdv_idx"]
        constraints = [
            models.UniqueConstraint(fields=["build", "hdv_idx"], name="memory_unique_row_per_build")
        ]
        indexes = [models.Index(fields=["build", "dataset"], name="memory_memo_build_i_40bd39_idx"),
                   models.Index(fields=["content_hash"], name="memory_memo_content_d5ab42_idx")]
        verbose_name_plural = "memories"

    def __str__(self) -> str:
        return f"{self.content_hash[:8]}: {self.text[:60]}"
