"""Memory search: the read side of the memory rows that builds write (`corpus.memory_rows`).

Search applies access control before retrieval: only corpora the user may read, with an active
build, are loaded and searched, and only their enabled datasets that the user may read
(`corpus.document_access`) pass the index's source filter, inside the scan.
Loaded builds, retrievers and late-interaction encoders and scorers are the process's, in `corpus.serving`.
A result is a `MemoryResult`: the engine's `SearchResult` and where the memory lives in the portal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import ApplicationError
from core.metrics import SEARCH_SECONDS
from corpus import serving
from corpus.build_parameters import BuildParameters
from corpus.document_access import hidden_dataset_ids
from corpus.memory_rows import StateMemoryStore
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.segment_cache import segment_path
from corpus.selectors import corpora_readable_among
from engine.channels import FIRST, LATE_INTERACTION, MEANING, WORDS, Channel, SearchTarget
from engine.fusion import FusionChoice
from engine.lexical import WordChannel, WordIndexError
from engine.loaded_build import LoadedIndex
from engine.meaning import MeaningChannel
from engine.query import BlendState
from engine.retrieval import SearchResult
from engine.text_store import LateInteractionChannel, TextStoreError

logger = logging.getLogger(__name__)

# What a result's `late_score` is, by the first-stage channel that gave it: the API's `late_kind`.
LATE_KINDS = {LATE_INTERACTION: "maxsim", WORDS: "bm25"}


@dataclass(frozen=True)
class MemoryResult(SearchResult):
    """A `SearchResult` as `memories_search` returns it, with where the memory lives: its corpus by
    primary key (`corpus_id`) and by name (`corpus_name`), its dataset's name (`dataset_name`, ""
    where unknown), and what `late_score` is (`late_kind`: "maxsim", late interaction; "bm25",
    exact words; None where `late_score` is None). Its `memory` carries the Memory row's primary key
    (`memory_id`) and its dataset (`source_id`: `corpus.memory_rows.StateMemoryStore`).
    """

    corpus_id: int
    corpus_name: str
    dataset_name: str
    late_kind: str | None

    @property
    def memory_id(self) -> int | None:
        """The Memory row's primary key (None: not a stored row)."""
        return self.memory.memory_id

    @property
    def dataset_id(self) -> int | None:
        return self.memory.source_id

    @property
    def source(self) -> str:
        """Where the memory came from: its dataset's name, else its metadata's "source"."""
        return str(self.dataset_name or self.memory.metadata.get("source") or "")


def _late_interaction(*, corpus_id: int, corpus: LoadedIndex, gguf_path: str
                      ) -> LateInteractionChannel | None:
    """The late-interaction channel of a build: the exact MaxSim of its rows from the token vectors
    its fill kept (`engine.text_store.LateInteractionChannel`); None for a build filled before they
    were kept, or when they cannot be read (the search then runs on HDC alone)."""
    try:
        return serving.late_interaction_for(corpus, gguf_path)
    except (OSError, ValueError, TextStoreError) as error:
        logger.warning("corpus %s: late-interaction scores unavailable, HDC alone: %s", corpus_id, error)
        return None


def _word_index(*, corpus_id: int, corpus: LoadedIndex) -> WordChannel | None:
    """The word channel of a state whose segments wrote exact-word indexes (`engine.lexical`,
    scored together over segments); None when one cannot be read (the search then runs on HDC
    alone)."""
    try:
        return serving.state_word_index(corpus)
    except (OSError, WordIndexError) as error:
        logger.warning("corpus %s: exact-word scores unavailable, HDC alone: %s", corpus_id, error)
        return None


def _meaning(*, corpus_id: int, corpus: LoadedIndex) -> MeaningChannel | None:
    """The meaning channel of a state whose builds wrote meaning rows (`engine.meaning`); None when
    they cannot be read (the search then ranks by HDC and words)."""
    try:
        return serving.state_meaning(corpus)
    except (OSError, ValueError) as error:
        logger.warning("corpus %s: meaning scores unavailable, HDC and words: %s", corpus_id, error)
        return None


@SEARCH_SECONDS.time()
def memories_search(*, user: AbstractBaseUser | AnonymousUser, corpus_ids: Iterable[int] = (),
                    corpora: Iterable[Corpus] | None = None, query: str,
                    blend: BlendState | None = None, token_budget: int | None = None,
                    top_document: bool = False, dataset_ids: Iterable[int] | None = None,
                    raw_limit: int | None = None, trace: dict | None = None) -> list[MemoryResult]:
    """Retrieve memories for `query` from the corpora in `corpus_ids` that `user` may read.

    Ids the user may not read, or of corpora without an active build, are ignored (an outsider
    cannot tell them from missing ones). Returns `MemoryResult`s, best first.
    Corpora whose active build used late interaction have their HDC candidates re-scored by exact
    MaxSim over the token vectors the build kept and fused under the build's measured rule (HDC
    alone when the rule says so, or for a build without those vectors); the other builds that wrote
    an exact-word index (`engine.lexical`) have them re-scored by BM25 over words, likewise.
    Raises ApplicationError when the chosen corpora cannot be searched together (different model
    or HDC dimensions). `trace` receives the count each ranking stage kept (`Retriever.search`).

    `corpora`, in place of `corpus_ids`: rows the caller has already loaded (with `active_build`),
    so that they are not read again; the same access rule is applied to them.

    `dataset_ids` narrows the search to those datasets (still only enabled ones). `raw_limit`
    skips the pipeline (threshold, late fusion, MMR, token budget): the index's top `raw_limit`
    rows by HDC score, for inspecting what the index itself ranks.
    """
    if not query.strip():
        return []
    corpora = _readable_corpora(user, corpus_ids=corpus_ids, corpora=corpora)
    if not corpora:
        return []
    params = {c.pk: c.active_build.params for c in corpora}
    gguf_path = _common_model(corpora, params)
    appended = [int(i) for c in corpora for i in c.active_appends or []]
    appends = IndexBuild.objects.in_bulk(appended) if appended else {}
    chosen = None if dataset_ids is None else {int(i) for i in dataset_ids}
    datasets, searched = _searched_datasets(user, corpora, chosen)
    targets = []
    for corpus in corpora:
        enabled = searched.get(corpus.pk, frozenset())
        targets.append(_search_target(corpus, built=params[corpus.pk], appends=appends, enabled=enabled,
                                      gguf_path=gguf_path))
    with serving.search_slot():
        if raw_limit is not None:
            results = serving.retriever_for(gguf_path).search_raw(
                query, targets, blend=blend, limit=raw_limit
            )
        else:
            results = serving.retriever_for(gguf_path).search(
                query, targets, blend=blend, token_budget=token_budget, top_document=top_document, trace=trace
            )
    late_kinds = {int(target.name): LATE_KINDS[first.name] for target in targets
                  if (first := target.channel(FIRST)) is not None}
    return _memory_results(results, corpora=corpora, dataset_names={pk: name for _, pk, name, *_ in datasets},
                           late_kinds=late_kinds)


def _searched_datasets(user: AbstractBaseUser | AnonymousUser, corpora: list[Corpus], chosen: set[int] | None
                       ) -> tuple[list[tuple], dict[int, frozenset[int]]]:
    """The corpora's (corpus, dataset, name, enabled, restricted) rows, in one plain query
    (prefetching model instances cost more), and per corpus the datasets the scan lets through:
    enabled, `chosen` (None: all), and readable by `user`. Only corpora holding documents with
    readers of their own ask who may read them (`corpus.document_access`, this request only)."""
    datasets = list(Dataset.objects.filter(corpus__in=[c.pk for c in corpora]).order_by()
                    .values_list("corpus_id", "pk", "name", "enabled", "restricted"))
    hidden = hidden_dataset_ids(user, {owner for owner, *_, restricted in datasets if restricted}) \
        if any(row[4] for row in datasets) else {}
    searched: dict[int, set[int]] = {}
    for owner, pk, _, on, _ in datasets:
        if on and pk not in hidden.get(owner, ()) and (chosen is None or pk in chosen):
            searched.setdefault(owner, set()).add(pk)
    return datasets, {owner: frozenset(pks) for owner, pks in searched.items()}


def _readable_corpora(user: AbstractBaseUser | AnonymousUser, *, corpus_ids: Iterable[int],
                      corpora: Iterable[Corpus] | None) -> list[Corpus]:
    """The corpora among `corpus_ids` (or the rows `corpora`) that have an active build and that
    `user` may read, by primary key."""
    if corpora is None:
        rows = Corpus.objects.filter(pk__in={int(i) for i in corpus_ids}, active_build__isnull=False) \
            .select_related("active_build").order_by("pk")
    else:
        rows = sorted((c for c in corpora if c.active_build_id), key=lambda c: c.pk)
    return corpora_readable_among(user, rows)


def _common_model(corpora: list[Corpus], params: dict[int, BuildParameters]) -> str:
    """The model file on this machine that every corpus's active build used (`params`, by corpus);
    an ApplicationError naming each when their models or HDC dimensions differ."""
    # A model is its identity (name and sha256) where builds recorded it, else its path.
    if (
        len({p.model_key for p in params.values()}) != 1
        or len({p.hdc_dimensions for p in params.values()}) != 1
    ):
        names = ", ".join(
            f"{c.name} ({params[c.pk].hdc_dimensions} dims, {Path(params[c.pk].gguf_path).name})"
            for c in corpora
        )
        raise ApplicationError(f"These corpora use different models or HDC dimensions and cannot be searched "
                               f"together: {names}.", {"corpus_ids": sorted(c.pk for c in corpora)})
    return str(serving.model_for(params[corpora[0].pk]))


def _search_target(corpus: Corpus, *, built: BuildParameters, appends: dict[int, IndexBuild],
                   enabled: frozenset[int], gguf_path: str) -> SearchTarget:
    """The corpus's state as the retriever searches it, with its channels (late interaction or exact
    words, and meaning after exact words) under the rules its build measured."""
    segments = corpus.serving_build_ids
    # This machine's copies, fetched from the object store when it lacks them (corpus.segment_cache).
    loaded = serving.loaded_state([segment_path(corpus.active_build),
                                   *[segment_path(appends[i]) for i in segments[1:]]])
    channels: list[Channel | None] = []
    rules: dict[str, FusionChoice] = {}
    if built.late_interaction:
        channels.append(_late_interaction(corpus_id=corpus.pk, corpus=loaded, gguf_path=gguf_path))
        # The rule measured on the build's own self-queries; a build made before it was
        # measured has none, and gets HDC alone: unweighted fusion lowered recall on real text.
        rules[LATE_INTERACTION] = built.fusion or FusionChoice()
    elif built.word_fusion is not None:
        # The exact-word channel, under the rule the build measured on its own self-queries.
        channels.append(_word_index(corpus_id=corpus.pk, corpus=loaded))
        rules[WORDS] = built.word_fusion
        if built.meaning_fusion is not None:
            channels.append(_meaning(corpus_id=corpus.pk, corpus=loaded))
            rules[MEANING] = built.meaning_fusion
    present = {channel.name: channel for channel in channels if channel is not None}
    return SearchTarget(corpus=loaded, store=StateMemoryStore(tuple(segments)), name=str(corpus.pk),
                        enabled_sources=enabled, channels=present,
                        rules={name: rule for name, rule in rules.items() if name in present})


def _memory_results(results: list[SearchResult], *, corpora: list[Corpus], dataset_names: dict[int, str],
                    late_kinds: dict[int, str]) -> list[MemoryResult]:
    """The engine's results with where each memory lives in the portal."""
    by_id: dict[int, Corpus] = {c.pk: c for c in corpora}
    found = []
    for result in results:
        corpus = by_id[int(result.target)]  # each target is named by its corpus's primary key
        found.append(MemoryResult(
            **{field.name: getattr(result, field.name) for field in fields(SearchResult)},
            corpus_id=corpus.pk, corpus_name=corpus.name,
            dataset_name=dataset_names.get(result.memory.source_id, ""),
            late_kind=late_kinds.get(corpus.pk) if result.late_score is not None else None))
    return found
