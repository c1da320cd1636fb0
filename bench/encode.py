"""Encoding throughput: documents/s of the HDC encoder and tokens/s of bulk tokenization.

Text: the Python stdlib's own documentation (`pydoc_data.topics` and the docstrings of a fixed
list of modules and their public members), cut into ~`--doc-tokens`-token documents by
`engine.datasets.chunk_spans` with the real Gemma tokenizer. The vocabulary index (IDF over
these documents, the GGUF's real `token_embd.weight`) is built once, untimed.

Measured in the same run, each against a baseline:
- encoding: `HDCEncoder.encode_flat` over batches of `--batch` documents, vs. the same encoder
  called once per document (a naive build loop); both must give identical bitmaps.
- tokenization: `GGUFTokenizer.bulk_tokenize` on the unique documents (a fresh tokenizer, so
  its word cache starts cold, and again warm), vs. llama.cpp's `/tokenize` over HTTP
  (`LlamaCppTokenizer`, server started here; `--no-http` skips it); ids must be identical.

    .venv/bin/python bench/encode.py                       # ~4,000 docs of ~500 tokens
    .venv/bin/python bench/encode.py --docs 1000 --no-http # quick
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script, bench/ would lead sys.path and bench/tokenize.py would shadow the stdlib's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

DOCSTRING_MODULES = (
    "builtins",
    "os",
    "os.path",
    "sys",
    "re",
    "json",
    "collections",
    "itertools",
    "functools",
    "pathlib",
    "typing",
    "asyncio",
    "subprocess",
    "threading",
    "logging",
    "argparse",
    "datetime",
    "decimal",
    "fractions",
    "statistics",
    "random",
    "math",
    "string",
    "textwrap",
    "unittest",
    "email.message",
    "http.client",
    "urllib.request",
    "xml.etree.ElementTree",
    "sqlite3",
    "csv",
    "zipfile",
    "tarfile",
    "shutil",
    "tempfile",
    "socket",
    "inspect",
    "dataclasses",
    "enum",
    "contextlib",
    "heapq",
    "bisect",
    "struct",
    "codecs",
    "io",
    "pickle",
    "copy",
    "pprint",
    "difflib",
    "hashlib",
    "secrets",
    "uuid",
    "time",
    "calendar",
    "shlex",
    "glob",
    "fnmatch",
    "traceback",
    "warnings",
    "weakref",
    "types",
    "operator",
    "queue",
    "sched",
    "selectors",
    "signal",
    "gzip",
    "base64",
)


def stdlib_text() -> str:
    """pydoc topics, then module and member docstrings; deterministic order."""
    import pydoc_data.topics

    parts = [pydoc_data.topics.topics[name] for name in sorted(pydoc_data.topics.topics)]
    with warnings.catch_warnings():
        # Touching deprecated aliases (typing.io, ...) warns; their docstrings are as good as any.
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in DOCSTRING_MODULES:
            module = importlib.import_module(module_name)
            parts.append(module.__doc__ or "")
            for name in sorted(vars(module)):
                member = getattr(module, name)
                if not name.startswith("_") and callable(member) and isinstance(member.__doc__, str):
                    parts.append(f"{module_name}.{name}\n{member.__doc__}")
    return "\n\n".join(part.strip() for part in parts if part and part.strip())


def best_of(repeat: int, run: Callable[[], object],
            clock: Callable[[], float] = time.perf_counter) -> tuple[float, object]:
    """The least of `repeat` timings of `run` by `clock` (wall time; `time.process_time` for CPU time on
    a loaded machine), and its last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = clock()
        result = run()
        best = min(best, clock() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--docs", type=int, default=4000, help="documents encoded (the unique ones, repeated)"
    )
    parser.add_argument("--doc-tokens", type=int, default=500, help="document length in tokens")
    parser.add_argument(
        "--baseline-docs", type=int, default=400, help="documents for the per-document baseline"
    )
    parser.add_argument("--batch", type=int, default=256, help="documents per encode_flat call")
    parser.add_argument("--dims", type=int, default=10000)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2, help="numba / torch / llama.cpp threads")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    parser.add_argument("--no-http", action="store_true", help="skip the llama.cpp /tokenize baseline")
    args = parser.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))

    import numba
    import torch

    from engine import gguf
    from engine.datasets import chunk_spans
    from engine.encoder import HDCEncoder, compute_idf, flatten
    from engine.model_files import default_gguf_path
    from engine.tokenizer import GGUFTokenizer
    from engine.vocab_writer import write_vocab_index

    try:
        from bench._hw import print_hardware
    except ImportError:  # the shared helper is optional for this script
        def print_hardware() -> None:
            print(f"== hardware ==\nlogical_cpus : {os.cpu_count()}")

    torch.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    print_hardware()
    gguf_path = default_gguf_path()

    tokenizer = GGUFTokenizer.from_gguf(gguf_path)
    text = stdlib_text()
    unique_docs = [text[start:end] for start, end, _ in chunk_spans(text, tokenizer, args.doc_tokens)]
    unique_tokens = tokenizer.bulk_tokenize(unique_docs)
    token_lists = [unique_tokens[i % len(unique_tokens)] for i in range(args.docs)]
    lengths = np.array([len(tokens) for tokens in token_lists])
    print(
        f"\n== corpus == stdlib docs: {len(text):,} chars -> {len(unique_docs)} unique documents; "
        f"encoding {len(token_lists)} (repeated), median {int(np.median(lengths))} tokens, {lengths.sum():,} "
        "tokens"
    )

    with tempfile.TemporaryDirectory(prefix="hdrag-bench-encode-") as scratch:
        started = time.perf_counter()
        vocab_total = tokenizer.vocab_size
        document_frequency = np.zeros(vocab_total, dtype=np.int64)
        for tokens in unique_tokens:
            document_frequency[np.unique(tokens)] += 1
        special = np.zeros(vocab_total, dtype=bool)
        special[list(tokenizer.special_ids)] = True
        vocabulary = np.flatnonzero((document_frequency > 0) & ~special)
        embeddings = gguf.load_token_embeddings(gguf_path, Path(gguf_path).parent.parent / "embeddings")
        vocab = write_vocab_index(Path(scratch) / "vocab.idx", token_ids=vocabulary,
                                  idf=compute_idf(document_frequency[vocabulary], len(unique_tokens)),
                                  embeddings=embeddings, dims=args.dims, ngram=args.ngram, seed=args.seed)
        encoder = HDCEncoder(vocab)
        print(
            f"== index == vocabulary {vocabulary.size} tokens, dims {args.dims}, ngram {args.ngram}, "
            f"m_cap {encoder.m_cap}, c_min {encoder.c_min}  (built untimed in "
            f"{time.perf_counter() - started:.1f} s)"
        )

        flat, offsets = flatten(token_lists)
        encoder.encode_flat(flat[: offsets[2]], offsets[:3])  # compile the numba kernels outside the timings

        def batched() -> tuple[np.ndarray, np.ndarray]:
            parts = [encoder.encode_flat(flat[offsets[s]:offsets[min(s + args.batch, args.docs)]],
                                         offsets[s:min(s + args.batch, args.docs) + 1] - offsets[s])
                     for s in range(0, args.docs, args.batch)]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

        n_base = min(args.baseline_docs, args.docs)

        def per_document() -> tuple[np.ndarray, np.ndarray]:
            parts = [encoder.encode([tokens]) for tokens in token_lists[:n_base]]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

        fast_s, (pos, neg) = best_of(args.repeat, batched)
        base_s, (base_pos, base_neg) = best_of(args.repeat, per_document)
        if not (np.array_equal(pos[:n_base], base_pos) and np.array_equal(neg[:n_base], base_neg)):
            raise SystemExit("MISMATCH: batched and per-document encodings differ")
        fast_rate, base_rate = args.docs / fast_s, n_base / base_s
        print(f"\n== encoding (best of {args.repeat}) ==")
        print(
            f"{'baseline: encode() per document':<40} {n_base:>6} docs {base_s:8.3f} s {base_rate:>10,.0f} "
            "docs/s"
        )
        print(
            f"{f'encode_flat, batches of {args.batch}':<40} {args.docs:>6} docs {fast_s:8.3f} s "
            f"{fast_rate:>10,.0f} docs/s"
            f"  ({lengths.sum() / fast_s:,.0f} tokens/s)"
        )
        print(f"ratio batched / per-document: {fast_rate / base_rate:.1f}x   bitmaps identical: yes   "
              f"target >= 1,000 docs/s: {'met' if fast_rate >= 1000 else 'NOT met'}")

    print("\n== tokenization of the unique documents ==")
    n_tokens = sum(map(len, unique_tokens))
    cold = GGUFTokenizer.from_gguf(gguf_path)
    cold_s, cold_ids = best_of(1, lambda: cold.bulk_tokenize(unique_docs))
    warm_s, warm_ids = best_of(args.repeat, lambda: cold.bulk_tokenize(unique_docs))
    rows = [
        ("GGUFTokenizer.bulk_tokenize (cold cache)", cold_s),
        ("GGUFTokenizer.bulk_tokenize (warm cache)", warm_s),
    ]
    if cold_ids != unique_tokens or warm_ids != unique_tokens:
        raise SystemExit("MISMATCH: tokenizer runs disagree")
    http_s = None
    if not args.no_http:
        from engine.llama_server import LlamaServer
        from engine.tokenizer import LlamaCppTokenizer

        with LlamaServer(gguf_path, threads=args.threads, parallel=1, ctx_size=2048) as server:
            http = LlamaCppTokenizer(server.base_url)
            http_s, http_ids = best_of(args.repeat, lambda: http.bulk_tokenize(unique_docs))
            http.close()
        if http_ids != unique_tokens:
            raise SystemExit("MISMATCH: GGUFTokenizer ids differ from llama.cpp /tokenize")
        rows.insert(0, ("baseline: llama.cpp /tokenize over HTTP", http_s))
    for label, seconds in rows:
        print(f"{label:<42} {n_tokens:>9,} tokens {seconds:8.3f} s {n_tokens / seconds:>12,.0f} tokens/s")
    if http_s is not None:
        print(
            f"ratio cold / HTTP: {http_s / cold_s:.1f}x   warm / HTTP: {http_s / warm_s:.1f}x   ids "
            "identical: yes"
        )
    print(f"target >= 300,000 tokens/s (cold): {'met' if n_tokens / cold_s >= 300_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
