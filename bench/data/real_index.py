"""A bitmap index of real text for `bench/search.py --real-text`, built once and reused from a directory.

Real memories: WordNet 3.0 glosses, then GCIDE entries (Debian `wordnet-base`, `dict-gcide`),
encoded by the engine (`build_index`, default config) up to `real_docs`. Queries: "What is <lemma>?"
for seeded WordNet synsets, encoded by the same build's encoder. Encoding runs at a few hundred
documents a second on 2 cores, so past `real_docs` the index is filled to `docs` rows with copies
of the real rows rotated by a random shift (`bits.permute_bits`): each keeps a real vector's
density and shape, but no longer lines up with real queries, so copies are easier distractors
than real unrelated text. Recall is therefore also reported over the real rows alone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from bench.data.glossaries import gcide_entries
from bench.data.wordnet import read_synsets
from engine import bits
from engine.index import BitmapIndex

ROTATION_BATCH = 20000


def _texts(real_docs: int) -> tuple[list[str], list[str]]:
    """Up to `real_docs` unique texts (WordNet glosses first, then GCIDE) and WordNet query lemmas."""
    synsets = read_synsets()
    texts: dict[str, None] = {}
    for synset in synsets:
        if len(texts) >= real_docs:
            break
        texts.setdefault(synset.gloss, None)
    if len(texts) < real_docs:
        for _, definition in gcide_entries():
            if len(texts) >= real_docs:
                break
            if len(definition.split()) >= 4:
                texts.setdefault(definition[:1500], None)
    lemmas = [synset.lemmas[0].replace("_", " ") for synset in synsets]
    return list(texts), lemmas


def real_text_index(directory: Path, *, docs: int, real_docs: int, queries: int, dims: int,
                    seed: int = 0) -> tuple[BitmapIndex, np.ndarray, np.ndarray, int, list[str]]:
    """(index of `docs` rows, query pos (q, words), query neg, rows that are real text, query texts)."""
    from engine.build import build_index
    from engine.config import Config
    from engine.loaded_build import load_corpus
    from engine.models import default_gguf_path
    from engine.retrieval import Retriever
    from engine.tokenizer import GGUFTokenizer

    config = Config(hdc_dimensions=dims)
    build_dir = directory / f"real_{real_docs}x{dims}"
    gguf_path = default_gguf_path()
    tokenizer = GGUFTokenizer.from_gguf(gguf_path)
    texts, lemmas = _texts(real_docs)
    if not (build_dir / "manifest.json").exists():
        dataset = directory / f"real_{real_docs}.jsonl"
        dataset.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        if build_dir.exists():
            for stale in sorted(build_dir.rglob("*"), reverse=True):
                stale.rmdir() if stale.is_dir() else stale.unlink()
            build_dir.rmdir()
        build_index(datasets=[(1, "real", dataset)], out_dir=build_dir, gguf_path=gguf_path, tokenizer=tokenizer,
                    config=config, cache_dir=Path(gguf_path).parent.parent / "embeddings")
    corpus = load_corpus(build_dir)
    retriever = Retriever(tokenizer, config)
    questions = [f"What is {lemma}?" for lemma in random.Random(seed).sample(lemmas, queries)]
    encoded = [retriever.encode_text(corpus, question)[:2] for question in questions]
    qp = np.stack([p for p, _ in encoded])
    qn = np.stack([n for _, n in encoded])
    real = corpus.count
    path = directory / f"real_{real_docs}_to_{docs}x{dims}_s{seed}.idx"
    try:
        index = BitmapIndex.open(path)
        if index.finalized and index.count == max(docs, real):
            return index, qp, qn, real, questions
    except Exception:  # noqa: BLE001 - any unreadable or missing file is rebuilt
        pass
    rng = np.random.default_rng(seed)
    index = BitmapIndex.create(path, dims)
    for start in range(0, max(docs, real), ROTATION_BATCH):
        stop = min(start + ROTATION_BATCH, max(docs, real))
        source = np.arange(start, stop) % real
        pos, neg = corpus.index.get_bitmaps(source)
        if start >= real or stop > real:
            shift = int(rng.integers(1, dims))
            copies = source >= 0
            copies[: max(0, real - start)] = False
            pos[copies], neg[copies] = bits.permute_bits(pos[copies], neg[copies], dims, shift)
        index.append(pos, neg)
    index.finalize()
    return BitmapIndex.open(path), qp, qn, real, questions
