"""Index serving: what a process keeps to search corpora, each cache bounded (`core.cache`).

Tokenizers, retrievers, late-interaction text encoders and channels, exact-word indexes, loaded
builds and states (memory-mapped index files), Chroma connections, a build's model on this machine
(`model_for`), and the slots that bound how many searches run at once. The apps ask this module;
none keeps a cache of its own. `core.runtime.reset()` empties every cache (tests, and a process
that changed its settings).

Loaded builds: a build directory stays memory-mapped while it is in the cache. Every lookup
first drops the builds whose manifest is gone (deleted by `builds_cleanup`, a failed build's
clean-up, or by hand, in any process), so a web process lets go of a deleted build's files and
the disk space comes back; at most `LOADED_BUILDS` builds stay mapped, least recently used out.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from core.cache import BoundedCache, array_bytes, function_cache_register
from core.runtime import default_gguf, engine_config
from corpus.build_parameters import BuildParameters
from engine.config import Config
from engine.loaded_build import MANIFEST, LoadedIndex, load_corpus
from engine.retrieval import Retriever

LOADED_BUILDS = 32
TOKENIZERS = 4
RETRIEVERS = 4
TEXT_ENCODERS = 8  # each holds ~4 MB (IDF table, projection) beside the mapped embeddings
CHROMA_CLIENTS = 4

_tokenizers: BoundedCache[str, Any] = BoundedCache(TOKENIZERS)
_retrievers: BoundedCache[tuple[str, Config], Retriever] = BoundedCache(RETRIEVERS)
def _in_memory_bytes() -> int:
    return settings.INDEX_MEMORY_CACHE_BYTES


_text_encoders: BoundedCache[tuple[str, str], Any] = BoundedCache(TEXT_ENCODERS)
# Read into RAM (not mapped): bounded by bytes as well as entries.
_late_interactions: BoundedCache[tuple[str, str], Any] = BoundedCache(
    TEXT_ENCODERS, max_bytes=_in_memory_bytes, weigh=array_bytes)
_word_indexes: BoundedCache[str, Any] = BoundedCache(
    LOADED_BUILDS, max_bytes=_in_memory_bytes, weigh=array_bytes
)
# A state's meaning rows (`engine.meaning.MeaningIndex`, its segments' joined), by its segments' directories.
_meanings: BoundedCache[tuple[str, ...], Any] = BoundedCache(LOADED_BUILDS, max_bytes=_in_memory_bytes,
                                                             weigh=array_bytes)
_builds: BoundedCache[str, LoadedIndex] = BoundedCache(LOADED_BUILDS)
_states: BoundedCache[tuple[str, ...], LoadedIndex] = BoundedCache(LOADED_BUILDS)
_chroma: BoundedCache[tuple[str, str, float], Any] = BoundedCache(CHROMA_CLIENTS)


@function_cache_register
@functools.lru_cache(maxsize=16)
def _model_sha256(path: str, size: int, mtime_ns: int) -> str:
    from engine.gguf import model_fingerprint

    return model_fingerprint(path, full=True).partition("-")[2]


def model_identity(gguf_path: str | Path) -> dict[str, str]:
    """{"model_name", "model_sha256"} of a GGUF: how a build records its model, so that every
    machine finds it in its own model cache (`model_for`); the hash is taken once per process."""
    path = Path(gguf_path).resolve()
    stat = path.stat()
    return {"model_name": path.name, "model_sha256": _model_sha256(str(path), stat.st_size, stat.st_mtime_ns)}


def model_for(parameters: BuildParameters) -> Path:
    """The GGUF a build used, on this machine. A build records its model by name and sha256: the
    recorded path when it holds that model, else a model of that name in this machine's model
    cache, `GGUF_PATH` or the packaged default (assembled on first use). Raises ApplicationError
    naming the model when none matches (a model of that name with another checksum is refused).
    Builds made before models were recorded by identity have only their path."""
    from core.errors import ApplicationError
    from engine.model_files import models_dir

    recorded = Path(parameters.gguf_path)
    name, sha256 = parameters.model_name, parameters.model_sha256
    if not sha256:
        return recorded
    candidates = [recorded, models_dir() / name]
    if settings.GGUF_PATH:
        candidates.append(Path(settings.GGUF_PATH))
    candidates = [c for c in candidates if c.name == name and c.is_file()]
    if not candidates and default_gguf().name == name:
        candidates.append(default_gguf())
    for candidate in candidates:
        if model_identity(candidate)["model_sha256"] == sha256:
            return candidate
    found = ", ".join(str(c) for c in candidates) or "no file of that name"
    raise ApplicationError(f"This index was built with the model {name} (sha256 {sha256[:12]}…), which this "
                           f"machine does not have ({found} differs or is missing): put that file in "
                           f"{models_dir()} or set GGUF_PATH.", {"model_name": name, "model_sha256": sha256})


def tokenizer_for(gguf_path: str | Path):  # engine.spm.GGUFTokenizer, imported lazily
    """The in-process tokenizer of a GGUF model (parsing Gemma's 262k-token vocabulary takes about a
    second, so one instance per model file lives in the process)."""
    from engine.spm import GGUFTokenizer

    key = str(Path(gguf_path).resolve())
    return _tokenizers.get(key, lambda: GGUFTokenizer.from_gguf(key))


def retriever_for(gguf_path: str | Path) -> Retriever:
    """A retriever for builds of one model under the current engine config."""
    config = engine_config()
    key = (str(gguf_path), config)
    return _retrievers.get(key, lambda: Retriever(tokenizer_for(gguf_path), config))


def text_encoder_for(build: LoadedIndex, gguf_path: str | Path):  # TokenVectorEncoder
    """The token-vector encoder a late-interaction build was filled with (made as in the build;
    making one costs the isotropy correction of the build's vocabulary, an SVD)."""
    from engine.text_store import text_encoder_for as make_encoder

    key = (str(build.build_dir), str(gguf_path))
    return _text_encoders.get(
        key,
        lambda: make_encoder(
            build,
            gguf_path=gguf_path,
            tokenizer=tokenizer_for(gguf_path),
            cache_dir=settings.EMBEDDING_CACHE_DIR,
            dim=settings.MULTIVECTOR_DIM,
        ),
    )


def late_interaction_for(build: LoadedIndex, gguf_path: str | Path):  # LateInteractionChannel | None
    """The exact late-interaction channel of a build its fill left token vectors for (`late.npz`,
    read into memory once: a few bytes per token of the corpus and ~1.5 kB per vocabulary token);
    None for a build without them."""
    from engine.text_store import LateInteractionChannel

    key = (str(build.build_dir), str(gguf_path))
    return _late_interactions.get(key, lambda: LateInteractionChannel.for_build(
        build, encoder=text_encoder_for(build, gguf_path), tokenizer=tokenizer_for(gguf_path)))


def word_index_for(build: LoadedIndex):  # engine.lexical.WordIndex | None
    """The exact-word (BM25) index a build wrote (`words.npz`, read into memory once: about 6
    bytes per distinct word of each memory); None for a build without one."""
    from engine.lexical import WordIndex

    return _word_indexes.get(str(build.build_dir), lambda: WordIndex.for_build(build.build_dir))


def loaded_build(build_dir: str | Path) -> LoadedIndex:
    """The build at `build_dir`, memory-mapped once per process (see the module docstring)."""
    forget_vanished_builds()
    key = str(Path(build_dir).resolve())
    return _builds.get(key, lambda: load_corpus(key))


def loaded_state(build_dirs: list[str | Path]) -> LoadedIndex:
    """A corpus's state: its full build and append segments (`engine.segments.load_state`), each
    segment memory-mapped once per process; one directory is `loaded_build`."""
    from engine.segments import load_state

    if len(build_dirs) == 1:
        return loaded_build(build_dirs[0])
    forget_vanished_builds()
    key = tuple(str(Path(d).resolve()) for d in build_dirs)
    return _states.get(key, lambda: load_state(list(key), load=loaded_build))


def state_word_index(state: LoadedIndex):  # WordIndex | SegmentedWordIndex | None
    """The exact-word index of a state: every segment's `word_index_for`, scored together."""
    from engine.segments import state_word_index as together

    return together(state, word_index_for)


def _meaning_files(segments: tuple[LoadedIndex, ...]) -> tuple[int, ...]:
    """Each segment's meaning file as it is now (its mtime in ns; 0: none yet)."""
    from engine.meaning import MEANING_FILE

    stamps = []
    for segment in segments:
        try:
            stamps.append((Path(segment.build_dir) / MEANING_FILE).stat().st_mtime_ns)
        except FileNotFoundError:
            stamps.append(0)
    return tuple(stamps)


_meaning_stamps: dict[tuple[str, ...], tuple[int, ...]] = {}


def state_meaning(state: LoadedIndex):  # engine.meaning.MeaningChannel | None
    """The meaning channel of a state (`engine.meaning`): its segments' rows joined in row order and
    read into memory once (388 bytes a memory), a segment not read by meaning yet as rows without
    a score (`MeaningIndex.partial`), loaded again when a segment's file appears; None when no
    segment has rows."""
    from engine.meaning import MeaningChannel, MeaningIndex

    segments = state.segments or (state,)
    key, stamps = tuple(str(segment.build_dir) for segment in segments), _meaning_files(segments)
    if _meaning_stamps.get(key, stamps) != stamps:
        _meanings.drop(lambda cached: cached != key)
    _meaning_stamps[key] = stamps

    def load() -> MeaningIndex | None:
        parts = [MeaningIndex.for_build(segment.build_dir) if stamp else None
                 for segment, stamp in zip(segments, stamps, strict=True)]
        return MeaningIndex.partial(parts, [segment.count for segment in segments])

    index = _meanings.get(key, load)
    if index is not None and index.count != state.count:
        raise ValueError(f"meaning rows: {index.count} for a state of {state.count} memories")
    return MeaningChannel(index) if index is not None else None


def forget_build(build_dir: str | Path) -> None:
    """Unmap a build (before its directory is deleted) and drop what was made for it."""
    from engine.vocab import clear_caches

    clear_caches()  # the engine's shared opened vocabularies may hold this build's
    key = str(Path(build_dir).resolve())
    _builds.drop(lambda cached: cached != key)
    _states.drop(lambda cached: key not in cached)
    _text_encoders.drop(lambda cached: cached[0] != key)
    _late_interactions.drop(lambda cached: cached[0] != key)
    _word_indexes.drop(lambda cached: cached != key)
    _meanings.drop(lambda cached: key not in cached)
    for stamped in [stamped for stamped in list(_meaning_stamps) if key in stamped]:
        _meaning_stamps.pop(stamped, None)


def forget_vanished_builds() -> None:
    """Drop every cached build, and what was made for one, whose manifest is gone: its directory
    was deleted meanwhile (a word index or late-interaction channel can outlive its build's place here)."""
    directories = {
        *_builds.snapshot(),
        *_word_indexes.snapshot(),
        *(d for key in _meanings.snapshot() for d in key),
        *(key[0] for key in _late_interactions.snapshot()),
        *(key[0] for key in _text_encoders.snapshot()),
    }
    for key in directories:
        if not (Path(key) / MANIFEST).exists():
            forget_build(key)


def loaded_build_dirs() -> list[str]:
    return _builds.snapshot()


# ---------------------------------------------------------------- Chroma


def chroma_client() -> Any:
    """The process's chromadb client for `CHROMA_URL` (short timeouts) or the embedded store.

    One per location, so a search or a page view costs no new connection and heartbeat. Raises
    ChromaDBConnectionError naming the location when Chroma cannot be reached (nothing is cached
    then, so the next call tries again).
    """
    from engine.multivector.client import connect_chroma

    location = settings.CHROMA_URL or str(settings.CHROMA_PATH)
    kind = "url" if settings.CHROMA_URL else "path"
    timeout = float(settings.CHROMA_TIMEOUT_SECONDS)
    return _chroma.get((kind, location, timeout), lambda: connect_chroma(**{kind: location}, timeout=timeout))


@function_cache_register
@functools.cache
def _search_slots(count: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(count)


def search_slot() -> threading.BoundedSemaphore:
    """Held around each engine search (`with runtime.search_slot(): ...`): at most
    `settings.SEARCH_CONCURRENCY` run at once in this process, the others wait their turn.
    A search's kernels already use every core (numba/OpenMP) and its Python parts hold the GIL,
    so more at once only oversubscribe the cores and every search gets slower (docs/scaling.md,
    "Searches at once")."""
    return _search_slots(settings.SEARCH_CONCURRENCY)
