"""GGUFTokenizer against the real llama.cpp server on the real Gemma model: identical ids."""

from __future__ import annotations

import random

import numpy as np
import pytest
import requests

from engine.spm import SPACE, GGUFTokenizer
from engine.tokenizer import LlamaCppTokenizer, Tokenizer

FIXED_TEXTS = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "x",
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It wasn't me, she said!",
    "  leading spaces",
    "trailing spaces   ",
    "a\tb\t\tc\n\nd\n",
    "def f(x):\n    if x:\n        return x  # comment\n\treturn None\n",
    "日本語のテキスト、中文字符、한국어",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "café naïve résumé Ångström Øresund ß",
    "e\u0301 combining, zero\u200bwidth, nbsp\u00a0here",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos> </s> <eos> <unk> <pad> <mask> <unused5> [multimodal]",
    "<b>bold</b> <table><tr><td>x</td></tr></table> a > </b>",
    f"{SPACE}{SPACE}literal escape chars{SPACE}",
    "x" * 500,
    " " * 40 + "y",
    "\n" * 45,
    "\t" * 33 + "z",
    "1234567890 3.14159 1e-9 0xDEADBEEF",
    "URL https://example.com/a/b?c=d&e=f#g",
]


def _random_text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 40)):
        roll = rng.random()
        if roll < 0.3:
            pieces.append(chr(rng.randint(32, 126)))
        elif roll < 0.45:
            pieces.append(rng.choice([" ", "  ", "   ", "\n", "\n\n", "\t", SPACE]))
        elif roll < 0.6:
            pieces.append(chr(rng.randint(0xA0, 0x2FF)))
        elif roll < 0.72:
            pieces.append(chr(rng.randint(0x4E00, 0x9FFF)))
        elif roll < 0.82:
            pieces.append(chr(rng.randint(0x1F300, 0x1FAFF)))
        elif roll < 0.94:
            pieces.append(rng.choice(["<start_of_turn>", "<bos>", "<b>", "</s>", "[multimodal]", "<unused12>",
                                      "the", "ing", " of", "tion", ">", "<"]))
        else:
            # Any scalar value except surrogates (not encodable as UTF-8).
            pieces.append(chr(rng.choice([rng.randint(0x300, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])))
    return "".join(pieces)


RANDOM_TEXTS = [_random_text(random.Random(seed)) for seed in range(300)]


@pytest.fixture(scope="module")
def session():
    with requests.Session() as http:
        yield http


def _server_tokens(http, base_url, text, *, parse_special, add_special=False):
    payload = {"content": text, "parse_special": parse_special, "add_special": add_special}
    response = http.post(f"{base_url}/tokenize", json=payload, timeout=30)
    response.raise_for_status()
    return response.json()["tokens"]


@pytest.fixture(scope="module")
def plain_tokenizer(gemma_gguf):
    return GGUFTokenizer.from_gguf(gemma_gguf)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "parse_special"])
def tokenizers(request, gemma_gguf):
    return request.param, GGUFTokenizer.from_gguf(gemma_gguf, parse_special=request.param)


@pytest.mark.parametrize("text", FIXED_TEXTS, ids=range(len(FIXED_TEXTS)))
def test_fixed_texts_match_llama_cpp(llama_server, session, tokenizers, text):
    parse_special, tokenizer = tokenizers
    assert tokenizer.tokenize(text) == _server_tokens(
        session, llama_server.base_url, text, parse_special=parse_special
    )


def test_random_unicode_matches_llama_cpp(llama_server, session, tokenizers):
    parse_special, tokenizer = tokenizers
    mismatches = [
        text
        for text in RANDOM_TEXTS
        if tokenizer.tokenize(text)
        != _server_tokens(session, llama_server.base_url, text, parse_special=parse_special)
    ]
    assert mismatches == []


def test_long_input_matches_llama_cpp(llama_server, session, gemma_gguf):
    import pydoc_data.topics

    text = "\n\n".join(pydoc_data.topics.topics.values())[:200_000]
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    ids = tokenizer.tokenize(text)
    assert len(ids) > 30_000
    assert ids == _server_tokens(session, llama_server.base_url, text, parse_special=False)


def test_add_special_prepends_bos_like_llama_cpp(llama_server, session, gemma_gguf):
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf, add_special=True)
    for text in ["", "Hello", "<bos>x"]:
        expected = _server_tokens(session, llama_server.base_url, text, parse_special=False, add_special=True)
        assert tokenizer.tokenize(text) == expected
        assert expected[0] == 2


def test_word_cache_equals_merging_whole_fragments(gemma_gguf):
    """The cached per-word path against the slow reference: one SPM pass over each fragment."""
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    for text in FIXED_TEXTS + RANDOM_TEXTS:
        reference: list[int] = []
        for fragment in tokenizer._partition(text):
            if isinstance(fragment, int):
                reference.append(fragment)
            elif fragment:
                reference.extend(tokenizer._merge(fragment.replace(" ", SPACE)))
        assert tokenizer.tokenize(text) == reference, repr(text)


def test_tiny_cache_gives_the_same_ids(gemma_gguf):
    full = GGUFTokenizer.from_gguf(gemma_gguf)
    tiny = GGUFTokenizer.from_gguf(gemma_gguf, cache_size=8)
    assert tiny.bulk_tokenize(RANDOM_TEXTS) == full.bulk_tokenize(RANDOM_TEXTS)
    assert len(tiny._cache) <= 8


def test_detokenize_matches_llama_cpp(llama_server, session, gemma_gguf):
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    rng = np.random.default_rng(7)
    sequences = [tokenizer.tokenize(text) for text in FIXED_TEXTS[:20]]
    sequences += [
        rng.integers(0, tokenizer.vocab_size, size=int(rng.integers(1, 30))).tolist() for _ in range(50)
    ]
    # Byte tokens alone: partial UTF-8 sequences must be replaced exactly as the server does.
    sequences += [rng.integers(238, 238 + 256, size=int(rng.integers(1, 8))).tolist() for _ in range(50)]
    for tokens in sequences:
        response = session.post(f"{llama_server.base_url}/detokenize", json={"tokens": tokens}, timeout=30)
        assert tokenizer.detokenize(tokens) == response.json()["content"], tokens


@pytest.mark.parametrize("text", [t for t in FIXED_TEXTS if "<" not in t] + RANDOM_TEXTS[:50])
def test_round_trip_where_llama_cpp_round_trips(llama_server, session, plain_tokenizer, text):
    tokenizer = plain_tokenizer
    ids = tokenizer.tokenize(text)
    server_text = session.post(
        f"{llama_server.base_url}/detokenize", json={"tokens": ids}, timeout=30
    ).json()["content"]
    assert tokenizer.detokenize(ids) == server_text
    if server_text == text:
        assert tokenizer.detokenize(ids) == text


def test_http_tokenizer_agrees_and_satisfies_protocol(llama_server, gemma_gguf):
    http = LlamaCppTokenizer(llama_server.base_url, gguf_path=gemma_gguf)
    local = GGUFTokenizer.from_gguf(gemma_gguf)
    assert isinstance(http, Tokenizer) and isinstance(local, Tokenizer)
    assert http.vocab_size == local.vocab_size == 262144
    assert http.special_ids == local.special_ids
    assert {0, 1, 2, 3, 106, 212} <= local.special_ids  # pad, eos, bos, unk, <end_of_turn>, '</s>'
    texts = FIXED_TEXTS[:12]
    assert http.bulk_tokenize(texts) == local.bulk_tokenize(texts)
    assert http.count_tokens("Hello world") == local.count_tokens("Hello world") == 2
    assert http.detokenize([9259, 1902]) == local.detokenize([9259, 1902]) == "Hello world"


def test_http_tokenizer_without_gguf_reports_bos_eos(llama_server):
    http = LlamaCppTokenizer(llama_server.base_url)
    assert http.special_ids == {1, 2}


def test_bad_input_is_rejected(gemma_gguf):
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    with pytest.raises(TypeError, match="expects str"):
        tokenizer.tokenize(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.detokenize([1, 262144])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.detokenize([-1])


def _tiny_vocab(add_space_prefix: bool) -> GGUFTokenizer:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["▁", "a", "b", "ab", "▁a", "▁ab", "ba", "aba"]
    scores = np.zeros(len(tokens), dtype=np.float32)
    # Scores: "ab" beats "ba"; "aba" beats "▁ab" beats "▁a".
    for text, score in {
        "ab": -1,
        "ba": -2,
        "aba": -0.5,
        "▁ab": -0.7,
        "▁a": -3,
        "▁": -4,
        "a": -5,
        "b": -5,
    }.items():
        scores[tokens.index(text)] = score
    types = np.array([2, 3, 3] + [6] * 256 + [1] * 8, dtype=np.int32)
    return GGUFTokenizer(
        tokens, scores, types, bos_id=1, eos_id=2, add_bos=True, add_space_prefix=add_space_prefix
    )


def test_tiny_vocab_merges_by_score_and_falls_back_to_bytes():
    tokenizer = _tiny_vocab(add_space_prefix=False)
    ids = {t: i for i, t in enumerate(tokenizer._tokens)}
    # "abab": the two "ab" pairs tie at -1 and the leftmost merges first; then "ab"+"a" forms
    # "aba" (-0.5), which outranks the second "ab", leaving a lone "b".
    assert tokenizer.tokenize("abab") == [ids["aba"], ids["b"]]
    assert tokenizer.tokenize("ba") == [ids["ba"]]
    assert tokenizer.tokenize("é") == [3 + 0xC3, 3 + 0xA9]  # byte fallback
    assert tokenizer.tokenize(" ab") == [ids["▁ab"]]
    assert tokenizer.detokenize(tokenizer.tokenize(" abé")) == " abé"


def test_tiny_vocab_space_prefix():
    tokenizer = _tiny_vocab(add_space_prefix=True)
    ids = {t: i for i, t in enumerate(tokenizer._tokens)}
    assert tokenizer.tokenize("ab") == [ids["▁ab"]]


@pytest.mark.slow
def test_in_process_tokenizer_only_for_vocabularies_the_engine_runs(gemma_gguf):
    from engine.model_files import default_chat_gguf_path
    from engine.tokenizer import in_process_tokenizer

    gemma = in_process_tokenizer(gemma_gguf)
    assert isinstance(gemma, GGUFTokenizer) and gemma.tokenize("Hello world") == [9259, 1902]
    assert (
        in_process_tokenizer(default_chat_gguf_path()) is None
    )  # Qwen's byte-level BPE: a server tokenizes it
