"""The meaning channel's encoder in bfloat16 against float32: its rate, its vectors and their ranking.

`engine.meaning.SentenceEncoder` runs all-MiniLM-L6-v2 in float32, or under torch's CPU autocast to
bfloat16 where the CPU multiplies bfloat16 itself ("auto"). For each known-item set of
bench/retrieval_eval.py (real text of several sources) both precisions encode the same documents
and queries, in the same process, float32 first as the baseline, and this prints:

* the rate (texts/s) of each on the documents, and the ratio;
* how far bfloat16's vectors are from float32's (1 - cosine, worst and mean), beside how far a row's
  int8 codes (what the channel stores) are from its float vector;
* recall@10 and MRR@10 of the encoder alone under each precision (a query's vector against every
  document's), and how many queries keep the same first hit.

    .venv/bin/python -m bench.encoder_precision --docs 1000 --queries 300
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np  # noqa: E402

from bench._hw import print_hardware  # noqa: E402
from engine.meaning import SentenceEncoder, cpu_has_bfloat16, quantize  # noqa: E402

DEFAULT_SETS = "pydocs,jargon,gcide,manpages,wordnet-paraphrase"


def ranking(documents: np.ndarray, queries: np.ndarray,
            relevant: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(recall@10, MRR@10, each query's first hit) of `queries` against `documents` by cosine."""
    top = np.argsort(-(queries @ documents.T), axis=1, kind="stable")[:, :10]
    hits = top == relevant[:, None]
    found = hits.any(axis=1)
    reciprocal = np.where(found, 1.0 / (hits.argmax(axis=1) + 1), 0.0)
    return float(found.mean()), float(reciprocal.mean()), top[:, 0]


def distance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(worst, mean) 1 - cosine of rows of unit vectors."""
    cosines = np.sum(a * b, axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return float(np.max(1.0 - cosines)), float(np.mean(1.0 - cosines))


def timed(encoder: SentenceEncoder, texts: list[str]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    vectors = encoder.encode(texts)
    return vectors, len(texts) / (time.perf_counter() - started)


def measure(name: str, data, encoders: dict[str, SentenceEncoder]) -> None:  # noqa: ANN001 - a KnownItemSet
    relevant = np.asarray(data.relevant)
    out: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
    for precision, encoder in encoders.items():
        documents, rate = timed(encoder, data.documents)
        out[precision] = (documents, encoder.encode(data.queries), rate)
    (d32, q32, r32), (d16, q16, r16) = out["float32"], out["bfloat16"]
    codes, scales = quantize(d32)
    worst, mean = distance(d32, d16)
    int8_worst, int8_mean = distance(d32, codes * scales[:, None])
    q_worst, _ = distance(q32, q16)
    recall32, mrr32, first32 = ranking(d32, q32, relevant)
    recall16, mrr16, first16 = ranking(d16, q16, relevant)
    chars = np.mean([len(text) for text in data.documents])
    print(f"{name:<20} {len(data.documents):>5} {chars:>6.0f} {r32:>8.1f} {r16:>8.1f} {r16 / r32:>5.2f}x "
          f"{worst:>9.1e} {mean:>9.1e} {q_worst:>9.1e} {int8_worst:>9.1e} {int8_mean:>9.1e} "
          f"{recall32:>6.3f}/{mrr32:.3f} {recall16:>6.3f}/{mrr16:.3f} {np.mean(first32 == first16):>7.3f}")


def main(argv: list[str] | None = None) -> int:
    from bench.data.wordnet import build_known_item_set, read_synsets
    from bench.retrieval_eval import load_text_set

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=DEFAULT_SETS, help="bench/retrieval_eval.py's sets")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    print_hardware()
    print(f"CPU multiplies bfloat16 itself: {cpu_has_bfloat16()}")
    encoders = {"float32": SentenceEncoder("float32"), "bfloat16": SentenceEncoder("bfloat16")}
    auto = SentenceEncoder("auto")
    auto.encode(["warm"])
    print(f"'auto' chooses: {auto.chosen}")
    for encoder in encoders.values():
        encoder.encode(["a first batch loads the model and warms torch"] * 8)
    print(f"\n{'set':<20} {'docs':>5} {'chars':>6} {'f32/s':>8} {'bf16/s':>8} {'ratio':>6} "
          f"{'1-cos max':>9} {'mean':>9} {'query max':>9} {'int8 max':>9} {'int8 mean':>9} "
          f"{'f32 R@10/MRR':>12} {'bf16 R@10/MRR':>13} {'same 1st':>8}")
    for name in args.sets.split(","):
        if name == "wordnet":
            synsets = read_synsets(args.wordnet_dir)
            data = build_known_item_set(synsets, args.docs, args.queries, seed=args.seed)
        else:
            data = load_text_set(name, args.docs, args.queries, seed=args.seed, wordnet_dir=args.wordnet_dir)
        measure(name, data, encoders)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
