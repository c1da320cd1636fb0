"""The real-text index of `bench/search.py --real-text`: built once by the engine, then reused.

Memories: `bench.data.real_corpus` (Debian-packaged dictionaries and manuals, ~500,000 memories),
built by `engine.build.build_index` with the default config (the portal's chunking and encoder).
Building takes tens of minutes on 2 cores, so the build is kept in `directory` and reused while
its manifest exists. Queries: the corpus's real questions, encoded by the build's encoder the way
the retriever encodes a query (`Retriever.encode_text`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.data.real_corpus import write_real_corpus
from engine.index import BitmapIndex

# Characters of text taken from each manual source at most (dictionaries are taken whole).
MANUAL_CHARS = 60_000_000


def real_text_index(directory: Path, *, queries: int, dims: int,
                    seed: int = 0) -> tuple[BitmapIndex, np.ndarray, np.ndarray, list[str]]:
    """(the build's index, query pos (q, words), query neg (q, words), query texts)."""
    from engine.build import build_index
    from engine.config import Config
    from engine.loaded_build import load_corpus
    from engine.model_files import default_gguf_path
    from engine.retrieval import Retriever
    from engine.tokenizer import GGUFTokenizer

    config = Config(hdc_dimensions=dims)
    build_dir = directory / f"real_text_{dims}"
    gguf_path = default_gguf_path()
    tokenizer = GGUFTokenizer.from_gguf(gguf_path)
    corpus_files = write_real_corpus(
        directory / "real-text", manual_chars=MANUAL_CHARS, queries=queries, seed=seed
    )
    if not (build_dir / "manifest.json").exists():
        if build_dir.exists():
            for stale in sorted(build_dir.rglob("*"), reverse=True):
                stale.rmdir() if stale.is_dir() else stale.unlink()
            build_dir.rmdir()
        started = last = time.perf_counter()

        def progress(phase: str, done: int, total: int) -> None:
            nonlocal last
            if time.perf_counter() - last >= 30 or done == total:
                last = time.perf_counter()
                print(f"  build {last - started:7.0f} s  {phase:<11} {done:>8} / {total}", flush=True)

        build_index(
            datasets=[(number + 1, name, path) for number, (name, path) in enumerate(corpus_files.datasets)],
            out_dir=build_dir,
            gguf_path=gguf_path,
            tokenizer=tokenizer,
            config=config,
            cache_dir=Path(gguf_path).parent.parent / "embeddings",
            progress=progress,
        )
    corpus = load_corpus(build_dir)
    retriever = Retriever(tokenizer, config)
    encoded = [retriever.encode_text(corpus, question)[:2] for question in corpus_files.questions]
    qp = np.stack([p for p, _ in encoded])
    qn = np.stack([n for _, n in encoded])
    return corpus.index, qp, qn, corpus_files.questions
