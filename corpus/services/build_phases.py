"""The phases of a build and of an append: each one step of a job, run in order by
`corpus.services.build_runner`, which declares the two lists and owns the skeleton around them
(claim, heartbeat, cancellation between phases, errors stored on the row, activation).

A phase says whether a job needs it (`applies`) and does its step (`run`): it reports progress and
polls cancellation through `job.reporter`, and leaves what later phases read on the `BuildJob`.
The progress names a phase reports are the pages' and the API's (`corpus.templatetags.portal.PHASE_NAMES`,
`corpus.models.BUILD_PHASE_SHARES`); the engine's own ("tokenize", "vocabulary", "encode", ...) come
from inside the encoding phases.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from core.errors import ApplicationError
from core.runtime import default_gguf, engine_config
from corpus.build_parameters import BuildParameters
from corpus.chroma import store_for
from corpus.events import send_build_event
from corpus.files import build_dir
from corpus.memory_rows import BuildMemoryStore, MemoryWriter, build_memory_texts, memory_hashes_among
from corpus.models import Dataset, IndexBuild
from corpus.object_store import fetch_dataset, publish_build
from corpus.services.appends import append_datasets, append_previous_dir, append_state
from corpus.services.corpora import datasets_superseded
from corpus.serving import model_for, model_identity, tokenizer_for
from engine.build import BuildCancelled, BuildResult, build_index, verify_build
from engine.channels import LATE_INTERACTION, WORDS, SearchTarget
from engine.config import Config
from engine.gate import channel_evidence
from engine.lexical import WORDS_FILE, WordIndex
from engine.loaded_build import load_corpus
from engine.meaning import write_meaning
from engine.readers import ReadOptions
from engine.retrieval import Retriever
from engine.segments import append_segment, segment_info
from engine.text_store import LateInteractionChannel, TextStoreError, text_encoder_for, text_store_fill
from engine.tokenizer import Tokenizer

Status = IndexBuild.Status


class BuildReporter:
    """Progress and cancellation for one running job, throttled to BUILD_PROGRESS_INTERVAL."""

    def __init__(self, build: IndexBuild) -> None:
        self.build = build
        self.phase = ""
        self.phase_started = time.monotonic()
        self.last_write = 0.0
        self.last_cancel_check = 0.0
        self.cancelled = False
        self.timings: dict[str, float] = {}
        self.estimate = 0  # the datasets' records as estimated at upload: tokenizing's unknown total

    def progress(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase == "tokenize" and not total and self.estimate:
            total = max(self.estimate, done)
        changed = phase != self.phase
        if changed:
            if self.phase:
                self.timings[self.phase] = round(now - self.phase_started, 3)
            self.phase, self.phase_started = phase, now
        finished = bool(total) and done >= total
        if not (changed or finished or now - self.last_write >= settings.BUILD_PROGRESS_INTERVAL):
            return
        self.last_write = now
        elapsed = now - self.phase_started
        rate = done / elapsed if elapsed > 0 else 0.0
        build = self.build
        build.phase, build.done, build.total, build.rate = phase, int(done), int(total), rate
        IndexBuild.objects.filter(pk=build.pk, status=Status.RUNNING).update(
            phase=phase, done=int(done), total=int(total), rate=rate, heartbeat=timezone.now())
        send_build_event(build, op="progress")

    def should_cancel(self) -> bool:
        now = time.monotonic()
        if not self.cancelled and now - self.last_cancel_check >= 0.5:
            self.last_cancel_check = now
            # Not running any more means the sweep gave this build up: stop as if cancelled.
            self.cancelled = not IndexBuild.objects.filter(
                pk=self.build.pk, status=Status.RUNNING, cancel_requested=False).exists()
        return self.cancelled

    def close_phase(self) -> None:
        if self.phase:
            self.timings[self.phase] = round(time.monotonic() - self.phase_started, 3)


@dataclass
class BuildJob:
    """What one build or append carries from phase to phase. `values` starts as the parameters the
    job was queued with and ends as what its row records; the fields without a default are set by
    the phase named beside them (reading one before it ran is an AttributeError)."""

    build: IndexBuild
    reporter: BuildReporter
    values: BuildParameters
    replaced: BuildParameters = field(default_factory=BuildParameters)  # set by a full build's activation
    datasets: list[Dataset] = field(init=False)  # CorpusDatasets, AppendDatasets
    previous_dir: str = field(init=False)  # AppendDatasets: the state's newest segment
    out_dir: Path = field(init=False)  # LoadModel
    gguf_path: Path = field(init=False)  # LoadModel
    tokenizer: Tokenizer = field(init=False)  # LoadModel
    writer: MemoryWriter = field(init=False)  # EncodeBuild, EncodeSegment
    result: BuildResult = field(init=False)  # EncodeBuild, EncodeSegment

    @cached_property
    def config(self) -> Config:
        """The engine's settings with the job's HDC settings (an append's are its state's)."""
        config, values = engine_config(), self.values
        drop = values.hdc_drop_components
        return config.replace(hdc_dimensions=values.hdc_dimensions, hdc_seed=values.hdc_seed,
                              hdc_ngram=values.hdc_ngram, chunk_size=values.chunk_size, ocr=values.ocr,
                              hdc_drop_components=config.hdc_drop_components if drop is None else drop)

    def retriever(self) -> Retriever:
        return Retriever(self.tokenizer, self.config)

    def target(self, **options: object) -> SearchTarget:
        """The job's own index as a search target (its `channels` and `rules`), for the gates'
        self-queries."""
        return SearchTarget(corpus=load_corpus(self.out_dir), store=BuildMemoryStore(self.build.pk),
                            name=str(self.build.corpus_id), **options)


class Phase(ABC):
    """One step of a job (see the module docstring)."""

    def applies(self, job: BuildJob) -> bool:  # noqa: ARG002 - most phases run in every job of their list
        return True

    @abstractmethod
    def run(self, job: BuildJob) -> None: ...


class CorpusDatasets(Phase):
    """A full build's datasets: the corpus's, less those a newer version waits to replace (the
    activation deletes them)."""

    def run(self, job: BuildJob) -> None:
        corpus = job.build.corpus
        job.datasets = list(corpus.datasets.exclude(pk__in=datasets_superseded(corpus=corpus)).order_by("pk"))
        if not job.datasets:
            raise ApplicationError("the corpus has no datasets")
        job.values = job.values.replace(dataset_ids=tuple(d.pk for d in job.datasets))


class AppendDatasets(Phase):
    """An append's datasets (those it was queued for that still exist), on the state it was queued
    on (`appends.append_previous_dir` refuses a state that changed since)."""

    def run(self, job: BuildJob) -> None:
        job.datasets = append_datasets(job.build)
        job.previous_dir = append_previous_dir(job.build)


class FetchDatasets(Phase):
    """Every dataset's file on this machine: fetched from the object store when a web process on
    another machine took the upload (`BUILD_STORAGE_URL`); an error names one that is gone."""

    def run(self, job: BuildJob) -> None:
        for dataset in job.datasets:
            fetch_dataset(dataset.file.name, Path(dataset.file.path))
            if not Path(dataset.file.path).is_file():
                raise ApplicationError(f"dataset {dataset.name!r}: its file {dataset.file.path} is missing")


class LoadModel(Phase):
    """The job's model on this machine (`job_model`) and its tokenizer; the row records the job's
    directory and the parameters it runs with."""

    def run(self, job: BuildJob) -> None:
        build, values = job.build, job.values
        job.gguf_path = job_model(values, corpus_names_model=bool(build.corpus.gguf_path))
        job.values = values.replace(gguf_path=str(job.gguf_path), **model_identity(job.gguf_path))
        job.out_dir = build_dir(build.corpus_id, build.pk)
        IndexBuild.objects.filter(pk=build.pk).update(build_dir=str(job.out_dir),
                                                      parameters=job.values.to_json())
        job.reporter.estimate = sum(d.record_count for d in job.datasets)
        job.reporter.progress("tokenizer", 0, 1)
        job.tokenizer = tokenizer_for(job.gguf_path)


def job_model(values: BuildParameters, *, corpus_names_model: bool) -> Path:
    """The GGUF a job encodes with, on this machine: always `serving.model_for`, by the identity the
    parameters record (an append copies its state's). A full build is queued with the path of the
    corpus's model on the queuing machine and no identity yet: where that path is not on this
    machine and the corpus names no model of its own, it is the packaged default, found here."""
    if not (values.model_sha256 or corpus_names_model or Path(values.gguf_path).is_file()):
        values = values.replace(gguf_path=str(default_gguf()))
    return model_for(values)


class EncodeBuild(Phase):
    """A full build's index (`engine.build.build_index`: chunks, embeddings, vocabulary, HDC rows,
    verification), its memory rows inserted as the batches come."""

    def run(self, job: BuildJob) -> None:
        job.writer = MemoryWriter(build=job.build, dataset_ids=[d.pk for d in job.datasets])
        reporter = job.reporter
        job.result = build_index(
            datasets=_sources(job.datasets), out_dir=job.out_dir, gguf_path=job.gguf_path,
            tokenizer=job.tokenizer, config=job.config, sink=job.writer.add, progress=reporter.progress,
            should_cancel=reporter.should_cancel, cache_dir=settings.EMBEDDING_CACHE_DIR)
        job.values = job.values.replace(skipped_documents=skipped_documents(job))


class EncodeSegment(Phase):
    """An append's segment (`engine.segments.append_segment`): the new datasets encoded with the
    state's frozen statistics, their rows numbered after the state's, and, where the base build has
    the exact-word channel, the segment's word index; documents the state holds are dropped."""

    def run(self, job: BuildJob) -> None:
        build, reporter = job.build, job.reporter
        job.writer = MemoryWriter(build=build, dataset_ids=[d.pk for d in job.datasets])
        state = append_state(build)
        retiring = [d.replaces_id for d in job.datasets if d.replaces_id is not None]
        job.result = append_segment(
            previous_dir=job.previous_dir, datasets=_sources(job.datasets), out_dir=job.out_dir,
            gguf_path=job.gguf_path, tokenizer=job.tokenizer, sink=job.writer.add, progress=reporter.progress,
            should_cancel=reporter.should_cancel, word_index=job.values.word_channel,
            read_options=ReadOptions(ocr=job.values.ocr),
            known=lambda ids: memory_hashes_among(build_ids=state, hashes=ids, retiring=retiring))
        job.values = job.values.replace(skipped_documents=skipped_documents(job))


def skipped_documents(job: BuildJob) -> tuple[tuple[str, str], ...] | None:
    """The documents the job's read skipped whole (`engine.build`: issues of kind "document"), as
    (dataset name, reason) for its row; None when none was."""
    names = {d.file.path: d.name for d in job.datasets}
    skipped = tuple((names.get(issue.path, issue.path), issue.message) for issue in job.result.skipped
                    if issue.kind == "document")
    return skipped or None


def _sources(datasets: list[Dataset]) -> list[tuple[int, str, str]]:
    return [(d.pk, d.name, d.file.path) for d in datasets]


class CheckRows(Phase):
    """The checks before a switch: every memory row in, and the directory verified again."""

    def run(self, job: BuildJob) -> None:
        job.writer.flush()
        job.reporter.progress("activate", 0, 1)
        stored = job.build.memories.count()
        if stored != job.result.documents:
            raise ApplicationError(f"memory rows: {stored} stored, the index holds {job.result.documents}")
        verify_build(job.result.out_dir)


class FillLateInteraction(Phase):
    """The build's token vectors in the corpus's multi-vector store, and the fusion rule measured
    on its own held-out self-queries (`engine.gate.channel_evidence`). Before activation: the serving
    build keeps its own records (ids carry the build) until the switch; a failure here fails this
    build, which `build_discard` cleans up."""

    def applies(self, job: BuildJob) -> bool:
        return job.values.late_interaction

    def run(self, job: BuildJob) -> None:
        build, reporter = job.build, job.reporter
        loaded = load_corpus(job.out_dir)
        encoder = text_encoder_for(loaded, gguf_path=job.gguf_path, tokenizer=job.tokenizer,
                                   cache_dir=settings.EMBEDDING_CACHE_DIR, dim=settings.MULTIVECTOR_DIM)
        memories = BuildMemoryStore(build.pk)
        filled = text_store_fill(store=store_for(build.corpus_id), corpus=loaded, encoder=encoder,
                                 tokenizer=job.tokenizer, build_id=build.pk, memories=memories,
                                 progress=reporter.progress, should_cancel=reporter.should_cancel)
        channel = LateInteractionChannel.for_build(loaded, encoder=encoder, tokenizer=job.tokenizer)
        if channel is None:
            raise TextStoreError(f"build {build.pk}: the fill left no late-interaction vectors in "
                                 f"{loaded.build_dir}")
        target = SearchTarget(corpus=loaded, store=memories, name=str(build.corpus_id),
                              channels={LATE_INTERACTION: channel})
        job.values = job.values.replace(
            text_records=filled.records, text_rows_skipped=len(filled.skipped_rows),
            fusion=channel_evidence(retriever=job.retriever(), target=target, channel=LATE_INTERACTION))


class WordChannel(Phase):
    """A full build's exact-word index (`engine.lexical`, BM25 over its memories' words) and how
    searches fuse it with HDC, chosen from the build's own held-out self-queries: the rule that beats
    HDC alone significantly, else equal weight unless HDC alone is significantly better
    (`channel_evidence`, `engine.lexical.WORD_FALLBACK`). A late-interaction build has that channel
    instead."""

    def applies(self, job: BuildJob) -> bool:
        return not job.values.late_interaction

    def run(self, job: BuildJob) -> None:
        job.reporter.progress("words", 0, 1)
        index = WordIndex.build(build_memory_texts(build_id=job.build.pk))
        index.save(job.out_dir / WORDS_FILE)
        target = job.target(channels={WORDS: index})
        job.values = job.values.replace(word_fusion=channel_evidence(retriever=job.retriever(), target=target,
                                                                     channel=WORDS))


class MeaningRows(Phase):
    """An append's own meaning rows, read before it serves (`engine.meaning`: each memory read by
    the sentence encoder, reported as the "meaning" phase, numbered from the segment's row offset)
    where every segment of its state has them: the state stays whole, and the segment serves under
    its base build's rule. A full build, or an append onto a state still being read, serves first
    and is read in the background (`corpus.services.meaning_jobs`)."""

    def applies(self, job: BuildJob) -> bool:
        if not (job.values.meaning_channel and not job.values.late_interaction):
            return False
        state = append_state(job.build)
        read = IndexBuild.objects.filter(pk__in=state, meaning=IndexBuild.Meaning.DONE).count()
        return bool(state) and read == len(state)

    def run(self, job: BuildJob) -> None:
        build, reporter = job.build, job.reporter
        total = build.memories.count()
        reporter.progress("meaning", 0, total)
        started = time.monotonic()
        first_row = int(segment_info(job.result.manifest)["row_offset"])
        written = write_meaning(build_memory_texts(build_id=build.pk, first_row=first_row), job.out_dir,
                                total=total, should_cancel=reporter.should_cancel,
                                progress=lambda done, total: reporter.progress("meaning", done, total))
        if written is None:
            raise BuildCancelled(f"build {build.pk} cancelled")
        IndexBuild.objects.filter(pk=build.pk).update(
            meaning=IndexBuild.Meaning.DONE, meaning_done=total, meaning_total=total,
            meaning_seconds=round(time.monotonic() - started, 3))


class Publish(Phase):
    """The job's files in the object store (`BUILD_STORAGE_URL`; without one, nothing to do), their
    sizes and checksums recorded for the machines that fetch them."""

    def run(self, job: BuildJob) -> None:
        job.reporter.progress("publish", 0, 1)
        published = publish_build(corpus_id=job.build.corpus_id, build_id=job.build.pk, directory=job.out_dir)
        job.values = job.values.replace(published=published)
