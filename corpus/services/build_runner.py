"""The body of the build task (`corpus.tasks.run_build`): claim a queued build or append, run it,
check what it wrote, and activate it, or end it through `build_liveness.build_discard`.

* A build runs once: the task claims its row with a conditional UPDATE queued -> running, so a
  redelivered or duplicated task message finds nothing to claim and does nothing.
* A build is visible to searches only after it completed, its memory rows are in and it verified:
  then one UPDATE of `corpus.active_build`, in the same transaction as the status change.
  A failure, cancellation or dead worker never touches `active_build`; the failed build's files
  and memory rows are removed and its error stays on the row.
* While it runs, `build_liveness.BuildHeartbeat` keeps its heartbeat fresh and `_Reporter` writes
  its progress and watches for a cancellation.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ApplicationError
from core.runtime import default_gguf, engine_config
from corpus.build_parameters import BuildParameters
from corpus.chroma import store_for
from corpus.events import send_build_event, send_event
from corpus.files import build_dir
from corpus.memory_rows import BuildMemoryStore, MemoryWriter, build_memory_texts, memory_hashes_among
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.object_store import fetch_dataset, publish_build
from corpus.services.appends import append_activate, append_datasets, append_previous_dir, append_state
from corpus.services.build_liveness import (
    BuildHeartbeat,
    build_discard,
    builds_sweep_dead_owners,
    process_identity,
)
from corpus.services.builds import after_job, corpus_parameters
from corpus.services.corpora import datasets_retire_replaced, datasets_superseded
from corpus.serving import model_for, model_identity, tokenizer_for
from engine.build import BuildCancelled, BuildResult, build_index, verify_build
from engine.channels import LATE_INTERACTION, MEANING, WORDS, SearchTarget
from engine.config import Config
from engine.fusion import FusionChoice
from engine.gate import channel_evidence
from engine.lexical import WORDS_FILE, WordIndex
from engine.loaded_build import LoadedIndex, MemoryStore, load_corpus
from engine.meaning import MeaningChannel, MeaningIndex, write_meaning
from engine.multivector.token_vectors import TokenVectorEncoder
from engine.retrieval import Retriever
from engine.segments import SEGMENT, append_segment
from engine.text_store import (
    LateInteractionChannel,
    TextStoreError,
    text_encoder_for,
    text_store_fill,
    text_store_prune,
)
from engine.tokenizer import Tokenizer

logger = logging.getLogger(__name__)
Kind, Status = IndexBuild.Kind, IndexBuild.Status


class _Reporter:
    """Progress and cancellation for one running build, throttled to BUILD_PROGRESS_INTERVAL."""

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


def build_run(*, build_id: int) -> IndexBuild | None:
    """Run a queued build to the end. Returns None when there was nothing to claim (already
    claimed by another delivery, cancelled while queued, or deleted). Never raises for a failing
    build: the error is stored on the row."""
    now = timezone.now()
    claimed = IndexBuild.objects.filter(pk=build_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started=now, heartbeat=now, phase="starting", worker=process_identity())
    if not claimed:
        # A redelivery after the pool child running it was killed (acks late, rejected on worker
        # loss) finds its build "running": fail it now rather than after BUILD_STALE_SECONDS.
        if builds_sweep_dead_owners(IndexBuild.objects.filter(pk=build_id)):
            return IndexBuild.objects.get(pk=build_id)
        logger.info("build %s: nothing to claim (already claimed, cancelled or deleted)", build_id)
        return None
    build = IndexBuild.objects.select_related("corpus").get(pk=build_id)
    send_build_event(build, op="started")
    heartbeat = BuildHeartbeat(build.pk)
    heartbeat.start()
    reporter = _Reporter(build)
    try:
        if build.kind == Kind.APPEND:
            _execute_append(build, reporter)
        else:
            _execute(build, reporter)
    except BuildCancelled:
        build_discard(build, status=Status.CANCELLED, error="Cancelled.")
    except Exception as error:
        logger.exception("build %s of corpus %s failed", build.pk, build.corpus_id)
        build_discard(build, status=Status.FAILED, error=f"{type(error).__name__}: {error}")
    finally:
        heartbeat.stopped.set()
        heartbeat.join()
    build.refresh_from_db()
    if build.status == Status.SUCCEEDED:
        after_job(corpus_id=build.corpus_id)
    return build


def _fusion_evidence(*, build: IndexBuild, corpus: LoadedIndex, config: Config, tokenizer: Tokenizer,
                     encoder: TokenVectorEncoder, memories: MemoryStore) -> FusionChoice:
    """The fusion rule for this build, from its own held-out self-queries
    (`engine.gate.channel_evidence`), scored by the token vectors the fill kept beside the
    store; searches read it from `BuildParameters.fusion`."""
    channel = LateInteractionChannel.for_build(corpus, encoder=encoder, tokenizer=tokenizer)
    if channel is None:
        raise TextStoreError(f"build {build.pk}: the fill left no late-interaction vectors in {corpus.build_dir}")
    target = SearchTarget(corpus=corpus, store=memories, name=str(build.corpus_id),
                          channels={LATE_INTERACTION: channel})
    return channel_evidence(retriever=Retriever(tokenizer, config), target=target, channel=LATE_INTERACTION)


def _word_channel(*, build: IndexBuild, out_dir: Path, config: Config, tokenizer: Tokenizer) -> FusionChoice:
    """Write the build's exact-word index (`engine.lexical`, BM25 over its memories' words) and
    choose, from the build's own held-out self-queries, how searches fuse it with HDC: the rule that
    beats HDC alone significantly, else equal weight unless HDC alone is significantly better
    (`channel_evidence`, `engine.lexical.WORD_FALLBACK`)."""
    index = WordIndex.build(build_memory_texts(build_id=build.pk))
    index.save(out_dir / WORDS_FILE)
    target = SearchTarget(corpus=load_corpus(out_dir), store=BuildMemoryStore(build.pk), name=str(build.corpus_id),
                          channels={WORDS: index})
    return channel_evidence(retriever=Retriever(tokenizer, config), target=target, channel=WORDS)


def _words_and_meaning(*, build: IndexBuild, values: BuildParameters, out_dir: Path, config: Config,
                       tokenizer: Tokenizer, reporter: _Reporter) -> BuildParameters:
    """`values` with the rule of the build's exact-word channel and, where the corpus has the meaning
    channel, of that too (their files written into `out_dir`)."""
    reporter.progress("words", 0, 1)
    values = values.replace(word_fusion=_word_channel(build=build, out_dir=out_dir, config=config, tokenizer=tokenizer))
    if values.meaning_channel:
        values = values.replace(meaning_fusion=_meaning_channel(
            build=build, out_dir=out_dir, config=config, tokenizer=tokenizer, word_fusion=values.word_fusion,
            reporter=reporter))
    return values


def _meaning_channel(*, build: IndexBuild, out_dir: Path, config: Config, tokenizer: Tokenizer,
                     word_fusion: FusionChoice, reporter: _Reporter) -> FusionChoice:
    """Write the build's meaning rows (`engine.meaning`: each memory read by the sentence encoder,
    its progress reported as the "meaning" phase) and choose, from the build's own self-queries,
    how searches fuse them with the order HDC and the words give (`channel_evidence`)."""
    written = _write_meaning(build, out_dir, reporter)
    target = SearchTarget(corpus=load_corpus(out_dir), store=BuildMemoryStore(build.pk), name=str(build.corpus_id),
                          channels={WORDS: WordIndex.for_build(out_dir), MEANING: MeaningChannel(written)},
                          rules={WORDS: word_fusion})
    return channel_evidence(retriever=Retriever(tokenizer, config), target=target, channel=MEANING)


def _write_meaning(build: IndexBuild, out_dir: Path, reporter: _Reporter, first_row: int = 0) -> MeaningIndex:
    """The meaning rows of the build's (or segment's, from `first_row`) memories, written to `out_dir`."""
    total = build.memories.count()
    reporter.progress("meaning", 0, total)
    written = write_meaning(build_memory_texts(build_id=build.pk, first_row=first_row), out_dir, total=total,
                            progress=lambda done, total: reporter.progress("meaning", done, total),
                            should_cancel=reporter.should_cancel)
    if written is None:
        raise BuildCancelled(f"build {build.pk} cancelled")
    return written


def _execute_append(build: IndexBuild, reporter: _Reporter) -> None:
    """An append job (`corpus.services.appends`): its datasets encoded into a new segment with the
    state's frozen statistics, their memory rows numbered after the state's, then activated."""
    datasets = append_datasets(build)
    _local_datasets(datasets)
    previous_dir = append_previous_dir(build)
    params = build.params
    state = append_state(build)
    out_dir = build_dir(build.corpus_id, build.pk)
    IndexBuild.objects.filter(pk=build.pk).update(build_dir=str(out_dir))
    reporter.estimate = sum(d.record_count for d in datasets)
    reporter.progress("tokenizer", 0, 1)
    gguf_path = model_for(params)
    tokenizer = tokenizer_for(gguf_path)
    writer = MemoryWriter(build=build, dataset_ids=[d.pk for d in datasets])
    retiring = [d.replaces_id for d in datasets if d.replaces_id is not None]
    result = append_segment(
        previous_dir=previous_dir, datasets=[(d.pk, d.name, d.file.path) for d in datasets], out_dir=out_dir,
        gguf_path=gguf_path, tokenizer=tokenizer, sink=writer.add, progress=reporter.progress,
        should_cancel=reporter.should_cancel, word_index=params.word_channel,
        known=lambda ids: memory_hashes_among(build_ids=state, hashes=ids, retiring=retiring))
    _check_written(build, writer, result, reporter)
    if params.meaning_channel:
        _write_meaning(build, out_dir, reporter, first_row=int(result.manifest[SEGMENT]["row_offset"]))
    if reporter.should_cancel():
        raise BuildCancelled(f"append {build.pk} cancelled")
    reporter.progress("publish", 0, 1)
    published = publish_build(corpus_id=build.corpus_id, build_id=build.pk, directory=out_dir)
    reporter.close_phase()
    timings = {**result.manifest.get("timings", {}), **{f"portal_{k}": v for k, v in reporter.timings.items()},
               "memory_insert": round(writer.seconds, 3)}
    append_activate(build=build, result=result, timings=timings, published=published)


def _check_written(build: IndexBuild, writer: MemoryWriter, result: BuildResult, reporter: _Reporter) -> None:
    """The checks before a switch: every memory row in, and the directory verified again."""
    writer.flush()
    reporter.progress("activate", 0, 1)
    stored = build.memories.count()
    if stored != result.documents:
        raise ApplicationError(f"memory rows: {stored} stored, the index holds {result.documents}")
    verify_build(result.out_dir)


def _local_datasets(datasets: list[Dataset]) -> None:
    """Every dataset's file on this machine: fetched from the object store when a web process on
    another machine took the upload (`BUILD_STORAGE_URL`); an error names one that is gone."""
    for dataset in datasets:
        fetch_dataset(dataset.file.name, Path(dataset.file.path))
        if not Path(dataset.file.path).is_file():
            raise ApplicationError(f"dataset {dataset.name!r}: its file {dataset.file.path} is missing")


def _execute(build: IndexBuild, reporter: _Reporter) -> None:
    corpus = build.corpus
    # A dataset with a newer version waiting is left out: the activation deletes it.
    datasets = list(corpus.datasets.exclude(pk__in=datasets_superseded(corpus=corpus)).order_by("pk"))
    if not datasets:
        raise ApplicationError("the corpus has no datasets")
    _local_datasets(datasets)
    values = build.params if build.parameters else corpus_parameters(corpus)
    drop = engine_config().hdc_drop_components if values.hdc_drop_components is None else values.hdc_drop_components
    config = engine_config().replace(hdc_dimensions=values.hdc_dimensions, hdc_seed=values.hdc_seed,
                                     hdc_ngram=values.hdc_ngram, chunk_size=values.chunk_size,
                                     hdc_drop_components=drop)
    # The model by identity (name and sha256), resolved on this machine: the path recorded when the
    # build was queued is the web process's, and another machine keeps its models elsewhere.
    gguf_path = Path(values.gguf_path) if Path(values.gguf_path).is_file() or corpus.gguf_path else default_gguf()
    values = values.replace(dataset_ids=tuple(d.pk for d in datasets), gguf_path=str(gguf_path),
                            **model_identity(gguf_path))
    out_dir = build_dir(corpus.pk, build.pk)
    IndexBuild.objects.filter(pk=build.pk).update(build_dir=str(out_dir), parameters=values.to_json())
    reporter.estimate = sum(d.record_count for d in datasets)
    reporter.progress("tokenizer", 0, 1)
    tokenizer = tokenizer_for(gguf_path)
    writer = MemoryWriter(build=build, dataset_ids=[d.pk for d in datasets])
    result = build_index(
        datasets=[(d.pk, d.name, d.file.path) for d in datasets], out_dir=out_dir, gguf_path=gguf_path,
        tokenizer=tokenizer, config=config, sink=writer.add, progress=reporter.progress,
        should_cancel=reporter.should_cancel, cache_dir=settings.EMBEDDING_CACHE_DIR)
    _check_written(build, writer, result, reporter)
    if values.late_interaction:
        # Before activation: the serving build keeps its own records (ids carry the build) until
        # the switch; a failure here fails this build, which `build_discard` cleans up.
        loaded = load_corpus(out_dir)
        encoder = text_encoder_for(loaded, gguf_path=gguf_path, tokenizer=tokenizer,
                                   cache_dir=settings.EMBEDDING_CACHE_DIR, dim=settings.MULTIVECTOR_DIM)
        filled = text_store_fill(store=store_for(corpus.pk), corpus=loaded, encoder=encoder, tokenizer=tokenizer,
                                 build_id=build.pk, memories=BuildMemoryStore(build.pk),
                                 progress=reporter.progress, should_cancel=reporter.should_cancel)
        values = values.replace(
            text_records=filled.records, text_rows_skipped=len(filled.skipped_rows),
            fusion=_fusion_evidence(build=build, corpus=loaded, config=config, tokenizer=tokenizer, encoder=encoder,
                                    memories=BuildMemoryStore(build.pk)))
    else:
        values = _words_and_meaning(build=build, values=values, out_dir=out_dir, config=config, tokenizer=tokenizer,
                                    reporter=reporter)
    if reporter.should_cancel():
        raise BuildCancelled(f"build {build.pk} cancelled")
    reporter.progress("publish", 0, 1)
    values = values.replace(published=publish_build(corpus_id=corpus.pk, build_id=build.pk, directory=out_dir))
    reporter.close_phase()
    timings = {**result.manifest.get("timings", {}), **{f"portal_{k}": v for k, v in reporter.timings.items()},
               "memory_insert": round(writer.seconds, 3), "memory_rows_per_second": round(writer.rows_per_second)}
    activation = time.monotonic()
    previous = _activate(build=build, result=result, timings=timings, parameters=values)
    # The switch itself, so the phases on the stats page add up to the whole build.
    timings["portal_activation"] = round(time.monotonic() - activation, 3)
    IndexBuild.objects.filter(pk=build.pk).update(timings=timings)
    if values.late_interaction or previous.late_interaction:
        _prune_text_records(corpus_id=corpus.pk, keep_build_id=build.pk)


def _activate(*, build: IndexBuild, result: BuildResult, timings: dict,
              parameters: BuildParameters) -> BuildParameters:
    """Mark the build succeeded and make it the corpus's active build, in one transaction, then
    tell the pages. Returns the parameters of the build it replaced (all defaults for none)."""
    corpus_id = build.corpus_id
    counts = {s["source_id"]: s["documents"] for s in result.manifest["sources"]}
    with transaction.atomic():
        # Locked, so a cancel or sweep racing with activation either lands before (we stop) or
        # finds the build succeeded (and leaves it alone).
        row = IndexBuild.objects.select_for_update().get(pk=build.pk)
        if row.status != Status.RUNNING or row.cancel_requested:
            raise BuildCancelled(f"build {build.pk} cancelled before activation")
        previous = BuildParameters.from_json(
            Corpus.objects.filter(pk=corpus_id).values_list("active_build__parameters", flat=True).first())
        IndexBuild.objects.filter(pk=build.pk).update(
            status=Status.SUCCEEDED, finished=timezone.now(), phase="done", done=result.documents,
            total=result.documents, documents=result.documents, duplicates=result.duplicates,
            vocab_size=result.vocab_size, timings=timings, parameters=parameters.to_json(),
            heartbeat=timezone.now())
        # A full build holds every dataset: it replaces the whole state, appends included (a merge).
        Corpus.objects.filter(pk=corpus_id).update(active_build_id=build.pk, active_appends=[])
        datasets_retire_replaced(dataset_ids=parameters.dataset_ids or [])
        for dataset_id, documents in counts.items():
            Dataset.objects.filter(pk=dataset_id).update(record_count=documents, record_count_exact=True)
    build.refresh_from_db()
    send_build_event(build, op="finished")
    send_event(f"corpus-{corpus_id}", op="activated", build_id=build.pk)
    return previous


def _prune_text_records(*, corpus_id: int, keep_build_id: int) -> None:
    """Drop older builds' text records once `keep_build_id` serves. Only logged on failure: no
    search reads them (searches filter on the active build), and the next switch prunes again."""
    try:
        pruned = text_store_prune(store=store_for(corpus_id), keep_build_ids=[keep_build_id])
    except Exception:  # noqa: BLE001 - the new build is active and correct; leftovers only cost space
        logger.warning("corpus %s: pruning text records of builds other than %s failed", corpus_id, keep_build_id,
                       exc_info=True)
    else:
        logger.info("corpus %s: pruned %d text records of builds other than %s", corpus_id, pruned, keep_build_id)
