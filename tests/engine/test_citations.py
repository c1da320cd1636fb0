"""engine.citations: sentences of a Markdown answer, claims, the support channels and attribution."""

from __future__ import annotations

import numpy as np
import pytest

from engine.citations import (
    HDCSupport,
    MeanSupport,
    WordSupport,
    attribute,
    claim_words,
    grounding_word,
    sentences,
)
from engine.lexical import words

ANSWER = """Sure! The `yield` statement pauses a function, e.g. in a loop. It returns a value to the caller.

- **First item.** Second sentence here.
1. A numbered item without a full stop
```python
def f(): yield 1. Not a sentence.
```
## A heading
Version 3.11 added it. Done."""


def test_sentences_are_slices_outside_code_without_block_markers():
    found = sentences(ANSWER)
    assert [s.text for s in found] == [
        "Sure!", "The `yield` statement pauses a function, e.g. in a loop.", "It returns a value to the caller.",
        "**First item.**", "Second sentence here.", "A numbered item without a full stop", "A heading",
        "Version 3.11 added it.", "Done."]
    assert all(ANSWER[s.start:s.end] == s.text for s in found)


@pytest.mark.parametrize("text", ["", "\n\n", "```\ncode. More code.\n```"])
def test_no_sentences_in_empty_text_or_code(text):
    assert sentences(text) == []


def test_claim_words_leave_out_stop_words_repeats_and_the_question():
    assert claim_words("The yield statement pauses the function; yield resumes it.", "What does yield do?") == [
        "statement", "pauses", "function", "resumes"]


def _word_reference(claim: list[str], memory: str) -> float:
    held = words(memory)
    return sum(word in held for word in claim) / len(claim) if claim else 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_word_support_matches_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{n}" for n in range(30)]
    claims = [list(dict.fromkeys(rng.choice(vocabulary, size=rng.integers(0, 8)))) for _ in range(5)]
    memories = [" ".join(rng.choice(vocabulary, size=rng.integers(0, 20))) for _ in range(4)]
    got = WordSupport().scores(claims, memories)
    assert got.shape == (5, 4)
    expected = [[_word_reference(claim, memory) for memory in memories] for claim in claims]
    np.testing.assert_allclose(got, expected)


MEMORIES = ["Generators pause at yield and resume where they left off when next() is called.",
            "The csv module reads and writes comma-separated values."]


def test_attribute_cites_supporting_memories_and_marks_unsupported_claims():
    answer = "Sure! Generators pause at yield and resume later. Bananas orbit purple moons every Tuesday."
    result = attribute(answer, MEMORIES, scorer=WordSupport(), threshold=0.5, question="What do generators do?")
    greeting, cited, made_up = result.sentences
    assert (greeting.claim, greeting.supported) == (False, False)
    assert cited.claim and cited.memories == (0,) and cited.scores[0] >= 0.5 > cited.scores[1]
    assert made_up.claim and made_up.memories == () and not made_up.supported
    assert result.claims == 2 and result.grounding == 0.5
    assert cited.to_dict() == {"text": cited.text, "claim": True, "memories": [0],
                               "scores": [round(s, 3) for s in cited.scores]}


def test_attribute_without_memories_or_claims():
    assert attribute("Bananas orbit purple moons.", [], scorer=WordSupport(), threshold=0.5).grounding == 0.0
    assert attribute("Sure! Done.", MEMORIES, scorer=WordSupport(), threshold=0.5).grounding is None
    with pytest.raises(ValueError, match="threshold"):
        attribute("x", MEMORIES, scorer=WordSupport(), threshold=0.0)


@pytest.mark.parametrize(("grounding", "word"), [(None, ""), (0.0, "not grounded"), (0.24, "not grounded"),
                                                 (0.25, "partly"), (0.74, "partly"), (0.75, "grounded"),
                                                 (1.0, "grounded")])
def test_grounding_words(grounding, word):
    assert grounding_word(grounding) == word


def test_hdc_support_ranks_the_memory_a_claim_comes_from(tokenizer, tmp_path, embedding_cache, gemma_gguf):
    from engine.build import build_index
    from engine.config import Config
    from engine.loaded_build import load_corpus

    texts = [*MEMORIES, "Photosynthesis converts light energy into chemical energy stored in glucose.",
             "A hash table maps keys to buckets for constant-time lookups."]
    dataset = tmp_path / "memories.jsonl"
    dataset.write_text("".join(f'{{"text": "{text}"}}\n' for text in texts))
    build_index(datasets=[(1, "memories.jsonl", dataset)], out_dir=tmp_path / "build", gguf_path=gemma_gguf,
                tokenizer=tokenizer, config=Config(), sink=lambda records: None, cache_dir=embedding_cache)
    scorer = HDCSupport(tokenizer, load_corpus(tmp_path / "build").encoder)
    claims = [claim_words("Photosynthesis turns light into chemical energy in glucose."),
              claim_words("Hash tables map keys to buckets."), []]
    table = scorer.scores(claims, texts)
    assert table.shape == (3, 4) and np.all((table >= 0) & (table <= 1))
    assert int(np.argmax(table[0])) == 2 and int(np.argmax(table[1])) == 3
    assert not table[2].any()
    both = MeanSupport(WordSupport(), scorer)
    assert both.name == "words+hdc"
    np.testing.assert_allclose(both.scores(claims, texts), (WordSupport().scores(claims, texts) + table) / 2)
