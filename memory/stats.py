"""Statistics of a corpus's active build, drawn as SVG: what the hypervectors look like.

Computed from a seeded sample of rows (never the whole index), so the page stays fast on big
corpora: per-memory density (share of non-zero dimensions), the distribution of cosine
similarities between sampled pairs (should be narrow around 0 for a healthy random-projection
code), per-dimension activation (no dead or saturated dimensions), memory sizes and sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from corpus import serving
from corpus.memory_rows import memory_counts_by_dataset
from corpus.models import Corpus
from corpus.segment_cache import segment_path
from engine import bits
from memory.svg import bar_chart, hbar_chart

SAMPLE_ROWS = 400
DIMENSION_BUCKETS = 100
TOP_DATASETS = 15


def _histogram(
    values: np.ndarray, bins: int, value_range: tuple[float, float]
) -> tuple[list[int], list[str]]:
    counts, edges = np.histogram(values, bins=bins, range=value_range)
    return counts.tolist(), [f"{edge:.2f}" for edge in edges[:-1]]


def _token_histogram(token_counts: np.ndarray, bins: int = 24) -> tuple[list[int], list[str]]:
    """Memory sizes in whole-token bins: a bin is ceil(max / bins) tokens wide, labelled by its start."""
    peak = max(int(token_counts.max(initial=1)), 1)
    width = max(1, -(-peak // bins))
    edges = np.arange(0, width * (bins + 1), width)
    counts, _ = np.histogram(token_counts, bins=edges)
    return counts.tolist(), [f"{int(edge):,}" for edge in edges[:-1]]


def top_and_others(counts: dict[str, int], top: int = TOP_DATASETS) -> list[tuple[str, int]]:
    """The `top` largest (name, count) pairs, largest first, then one "N others" row for the rest."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    rest = ranked[top:]
    if len(rest) > 1:
        return ranked[:top] + [(f"{len(rest):,} other datasets", sum(count for _, count in rest))]
    return ranked


def directory_bytes(path: str) -> int:
    """Bytes of the files under `path` (the build's index on disk); 0 when it is gone."""
    root = Path(path)
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0


def _dataset_names(corpus: Corpus) -> dict[int, str]:
    """The corpus's dataset names by id, the same for every reader: a document with readers of its
    own is not named (`corpus.document_access`)."""
    return {pk: f"document #{pk} (own readers)" if restricted else name
            for pk, name, restricted in corpus.datasets.values_list("pk", "name", "restricted")}


def corpus_stats(*, corpus: Corpus, sample_rows: int = SAMPLE_ROWS, seed: int = 0) -> dict[str, Any]:
    """Numbers and SVG charts for `corpus.active_build`; {"empty": True} when there is none."""
    build = corpus.active_build
    if build is None:
        return {"empty": True}
    directory = segment_path(build)
    loaded = serving.loaded_build(directory)
    count, dims = loaded.count, loaded.dims
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(count, size=min(sample_rows, count), replace=False))
    pos, neg = loaded.index.get_bitmaps(rows)
    ternary = bits.unpack_ternary(pos, neg, dims).astype(np.int8)  # (sample, dims) in {-1, 0, 1}
    nonzero = (ternary != 0).sum(axis=1)
    density = nonzero / dims

    dense = ternary.astype(np.float32)
    norms = np.sqrt(np.maximum(nonzero, 1)).astype(np.float32)
    cosine = (dense @ dense.T) / np.outer(norms, norms)
    pairs = cosine[np.triu_indices(len(rows), k=1)]

    active_pos = (ternary > 0).mean(axis=0)
    active_neg = (ternary < 0).mean(axis=0)
    buckets = np.array_split(np.arange(dims), min(DIMENSION_BUCKETS, dims))
    activation = [float((active_pos[b] + active_neg[b]).mean()) for b in buckets]
    token_counts = np.asarray(loaded.index.token_counts)

    density_counts, density_labels = _histogram(density, 20, (0.0, max(float(density.max(initial=0)), 1e-6)))
    cosine_counts, cosine_labels = _histogram(pairs, 40, (-1.0, 1.0)) if pairs.size else ([], [])
    tokens_counts, tokens_labels = _token_histogram(token_counts)
    by_dataset = memory_counts_by_dataset(build_ids=[build.pk])
    datasets = _dataset_names(corpus)
    per_dataset = top_and_others({datasets.get(pk, f"dataset #{pk}"): n for pk, n in by_dataset.items()})
    total_seconds = ((build.finished - build.started).total_seconds()
                     if build.finished and build.started else None)
    timings = build_phase_seconds(build.timings or {}, total_seconds)
    return {
        "empty": False, "build": build, "count": count, "dims": dims, "sampled": len(rows),
        "vocab_size": build.vocab_size, "duplicates": build.duplicates,
        "mean_density": float(density.mean()) if len(rows) else 0.0,
        "mean_abs_cosine": float(np.abs(pairs).mean()) if pairs.size else 0.0,
        "dead_dimensions": int(((active_pos + active_neg) == 0).sum()),
        "disk_bytes": directory_bytes(str(directory)), "timings": timings,
        "total_seconds": total_seconds,
        "dataset_count": len(by_dataset),
        "charts": [
            bar_chart(density_counts, labels=density_labels,
                      title="Density: share of non-zero dimensions per memory", x_label="density",
                      color="#3867d6"),
            bar_chart(cosine_counts, labels=cosine_labels,
                      title=f"Cosine similarity of {len(pairs):,} sampled pairs", x_label="cosine",
                      color="#8854d0", tick_every=5),
            bar_chart(activation, labels=[f"{b[0]:,}" for b in buckets],
                      title=f"Activation per dimension (share of memories non-zero, {len(buckets)} buckets)",
                      x_label="dimension", color="#20bf6b", tick_every=10, integer=False),
            bar_chart(tokens_counts, labels=tokens_labels, title="Memory size in tokens", x_label="tokens",
                      color="#fa8231"),
            hbar_chart(per_dataset, title=f"Memories per dataset ({len(by_dataset):,} datasets)",
                       color="#0fb9b1"),
        ],
    }


def build_phase_seconds(timings: dict, total_seconds: float | None) -> dict[str, float]:
    """A build's time by phase, adding up to the whole build: the worker's own wall-clock phases
    (`portal_*`: tokenizer load, the engine's tokenize/embeddings/vocabulary/encode/verify, the
    activation checks, word index or late-interaction fill, the switch), then what is left of the
    build's start-to-finish time ("other": claiming the job, writing the rows of the last batch).
    Builds older than those timings show the engine's phases alone."""
    worker = {phase.removeprefix("portal_"): seconds for phase, seconds in timings.items()
              if phase.startswith("portal_") and isinstance(seconds, int | float)}
    if not worker:
        return {
            phase: seconds
            for phase, seconds in timings.items()
            if isinstance(seconds, int | float) and "per_second" not in phase and phase != "memory_insert"
        }
    if total_seconds is not None and total_seconds - sum(worker.values()) >= 0.05:
        worker["other"] = round(total_seconds - sum(worker.values()), 3)
    return worker
