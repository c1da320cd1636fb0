"""bench/retrieval_eval.py --gguf: rankers built from another model's token embeddings, tokenized by
a real llama.cpp server when the engine has no in-process tokenizer for it (the packaged Qwen)."""

from __future__ import annotations

import argparse
from contextlib import ExitStack

import pytest
import requests

from bench.embedding_compare import parse
from bench.embedding_model import measure_tokenization, open_embedding_model, resolve_gguf
from bench.retrieval_eval import HDCRanker, LateInteractionRanker
from engine.model_files import default_chat_gguf_path
from engine.spm import GGUFTokenizer

DOCUMENTS = [
    "a small domesticated carnivorous mammal with soft fur, kept as a pet or for catching mice",
    "a large body of salt water that covers most of the surface of the earth",
    "a device that computes, especially a programmable electronic machine",
    "the natural satellite of the earth, visible by reflected light from the sun",
    "a tall perennial woody plant having a main trunk and branches",
    "a written or printed work consisting of pages bound together",
]
QUERIES = [
    "domesticated mammal catching mice",
    "salt water covering the earth",
    "programmable electronic machine",
    "natural satellite reflected light",
    "woody plant trunk branches",
    "printed pages bound together",
]


def _args(tmp_path, model) -> argparse.Namespace:
    return argparse.Namespace(dims=2048, ngram=3, hdc_seed=42, work_dir=tmp_path, embedding_model=model,
                              li_weighting="sqrt_idf", li_min_idf=0.0, li_drop_components=0)


def test_default_model_is_gemma_tokenized_in_process():
    with ExitStack() as stack:
        model = open_embedding_model(None, stack, threads=1)
        assert model.tokenized_by == "in process"
        assert isinstance(model.make_tokenizer(), GGUFTokenizer)
        assert "gemma3" in model.describe() and "262,144 x 640" in model.describe()


@pytest.mark.service  # open_embedding_model("chat") starts a llama.cpp server
def test_chat_model_is_tokenized_by_a_real_server_that_stops_with_the_stack(tmp_path):
    with ExitStack() as stack:
        model = open_embedding_model("chat", stack, threads=1)
        assert model.path == resolve_gguf("chat") == default_chat_gguf_path()
        tokenizer = model.make_tokenizer()
        base_url = tokenizer.base_url
        assert model.tokenized_by == f"by llama.cpp /tokenize at {base_url}"
        assert "qwen2" in model.describe() and "151,936 x 896" in model.describe()
        assert tokenizer.vocab_size == 151_936
        assert tokenizer.tokenize("Hello world") == [9707, 1879]
        assert {151643, 151644, 151645} <= tokenizer.special_ids  # <|endoftext|>, <|im_start|>, <|im_end|>
        speed = measure_tokenization(model, DOCUMENTS)
        assert speed.documents == len(DOCUMENTS) and speed.tokens == sum(
            len(tokenizer.tokenize(d)) for d in DOCUMENTS
        )

        for ranker in (HDCRanker(_args(tmp_path, model)), LateInteractionRanker(_args(tmp_path, model))):
            ranker.index(DOCUMENTS)
            ranked = ranker.rank(QUERIES, 3)
            assert ranked[:, 0].tolist() == list(range(len(DOCUMENTS))), ranker.name
        built = HDCRanker(_args(tmp_path / "again", model))
        built.index(DOCUMENTS)
        assert built.corpus.manifest["model"]["path"] == str(default_chat_gguf_path())
        assert built.index_bytes > 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{base_url}/health", timeout=2)


def test_a_missing_path_is_refused():
    with pytest.raises(FileNotFoundError, match="no such file"):
        resolve_gguf("/nonexistent/model.gguf")


def test_compare_reads_every_figure_of_a_report():
    report = """embedding model: x
tokenization: 5,000 documents, 80,000 tokens in 7.00 s: 714 docs/s, 11,428 tokens/s
HDC build: 120 docs/s (41.00 s, load and queries' encoder setup included), index 31.5 MB

ranker                                    recall@10   MRR@10   index s   query s  top hub hubs>1/3 distinct
BM25 (bm25s)                                 0.6700   0.5701      0.06      0.03    0.060        0    0.723
HDC exact (dims 10000, ngram 5)              0.6800   0.5345     53.73     31.15    0.080        0    0.578
late interaction (sqrt_idf, drop 16)         0.7000   0.5448     26.27     15.68    0.180        0    0.505

BM25 (bm25s) vs HDC exact (dims 10000, ngram 5): recall@10 -0.0100, MRR@10 +0.0356 (ratio 1.067)
"""
    run = parse(report)
    assert run.scores == {
        "BM25": (0.67, 0.5701),
        "HDC exact": (0.68, 0.5345),
        "late interaction": (0.7, 0.5448),
    }
    assert (run.tokens_per_s, run.tokenize_docs_per_s, run.build_docs_per_s, run.index_mb) == (
        11428,
        714,
        120,
        31.5,
    )
    with pytest.raises(ValueError, match="lacks a figure"):
        parse(report.replace("HDC build", "HDC built"))
