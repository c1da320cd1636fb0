"""engine.citations: sentences of a Markdown answer, claims, the support channels and attribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.citations import (
    HDCSupport,
    MeanSupport,
    SubjectWindowSupport,
    WordSupport,
    asked_names,
    attribute,
    claim_tokens,
    claim_words,
    grounding_word,
    is_claim,
    mentions,
    misbound_values,
    sentences,
    subject_words,
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
        "Sure!",
        "The `yield` statement pauses a function, e.g. in a loop.",
        "It returns a value to the caller.",
        "**First item.**",
        "Second sentence here.",
        "A numbered item without a full stop",
        "A heading",
        "Version 3.11 added it.",
        "Done.",
    ]
    assert all(ANSWER[s.start:s.end] == s.text for s in found)


@pytest.mark.parametrize("text", ["", "\n\n", "```\ncode. More code.\n```"])
def test_no_sentences_in_empty_text_or_code(text):
    assert sentences(text) == []


def test_claim_words_leave_out_stop_words_repeats_and_the_question():
    assert claim_words(
        "The yield statement pauses the function; yield resumes it.", "What does yield do?"
    ) == ["statement", "pauses", "function", "resumes"]


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
    result = attribute(
        answer, MEMORIES, scorer=WordSupport(), threshold=0.5, question="What do generators do?"
    )
    greeting, cited, made_up = result.sentences
    assert (greeting.claim, greeting.supported) == (False, False)
    assert cited.claim and cited.memories == (0,) and cited.scores[0] >= 0.5 > cited.scores[1]
    assert made_up.claim and made_up.memories == () and not made_up.supported
    assert result.claims == 2 and result.grounding == 0.5
    assert cited.to_dict() == {
        "text": cited.text,
        "claim": True,
        "memories": [0],
        "scores": [round(s, 3) for s in cited.scores],
        "certainty": None,
        "unsure": False,
    }


def _spans(answer: str, logprob_of) -> list[tuple[int, int, float]]:  # noqa: ANN001
    """Token spans as engine.llm.answer.AnswerTokens makes them: one token per word or run of other
    characters, each with `logprob_of(token text)`; byte offsets of the UTF-8 text."""
    import re

    spans, at = [], 0
    for token in re.findall(r"\w+|\W+", answer):
        size = len(token.encode("utf-8"))
        spans.append((at, at + size, logprob_of(token)))
        at += size
    return spans


def test_certainty_weighs_each_supported_claim_by_its_words_probabilities():
    # Non-ASCII text before the claims: the token spans are UTF-8 byte offsets, the sentences characters.
    answer = ("Ça — ça! Generators pause at yield and resume later. Generators resume at 512 "
              "calls. Bananas orbit purple moons every Tuesday.")
    sure, guessed = math.log(0.9), math.log(0.05)
    spans = _spans(answer, lambda token: guessed if token == "512" else sure)
    memories = [*MEMORIES, "Generators resume at 256 or 512 calls when they pause."]
    result = attribute(
        answer,
        memories,
        scorer=WordSupport(),
        threshold=0.5,
        question="What do generators do?",
        token_logprobs=spans,
    )
    _, cited, valued, made_up = result.sentences
    assert cited.supported and cited.certainty == pytest.approx(0.9) and not cited.unsure
    # Its claim words are resume, 512 and calls ("generators" is the question's): the geometric mean.
    assert valued.supported and valued.certainty == pytest.approx((0.9 * 0.05 * 0.9) ** (1 / 3))
    assert valued.unsure and valued.to_dict()["unsure"] is True
    assert not made_up.supported and made_up.certainty == pytest.approx(0.9)
    assert result.grounding == pytest.approx((cited.certainty + valued.certainty) / 3)
    # Without log-probabilities (a server that sends none) the grounding is the plain share.
    plain = attribute(
        answer, memories, scorer=WordSupport(), threshold=0.5, question="What do generators do?"
    )
    assert plain.grounding == pytest.approx(2 / 3) and plain.sentences[1].certainty is None


def test_certainty_ignores_tokens_past_the_answer_and_words_no_token_covers():
    answer = "Generators pause at yield."
    spans = _spans(answer, lambda token: math.log(0.8) if token == "Generators" else math.log(0.5))
    past_the_end = (len(answer) + 5, len(answer) + 9, -9.0)  # a cut tail's token
    result = attribute(
        answer, MEMORIES, scorer=WordSupport(), threshold=0.5, token_logprobs=[*spans, past_the_end]
    )
    assert result.sentences[0].certainty == pytest.approx((0.8 * 0.5 * 0.5) ** (1 / 3))
    # Tokens for the first word only (the rest was taken back): the certainty is that word's.
    partial = attribute(answer, MEMORIES, scorer=WordSupport(), threshold=0.5, token_logprobs=spans[:1])
    assert partial.sentences[0].certainty == pytest.approx(0.8)
    assert attribute(answer, MEMORIES, scorer=WordSupport(), threshold=0.5,
                     token_logprobs=[]).sentences[0].certainty is None


# The Jargon File memory bench.answers primed "What is a psyton?" with (2026-11-26): three entries side by
# side.
JARGON = (
    "ly prime. The hacker backgammon usage stems from the idea that a\n   pseudoprime is almost as good as"
    " a prime: it will do the same job unless\n   you are unlucky.\n\n   :pseudosuit: "
    "/soo'doh\u00b7s[y]oot`/, n."
    "\n\n   A {suit} wannabee; a hacker who has decided that he wants to be in\n   management or administrat"
    "ion and begins wearing ties, sport coats, and\n   (shudder!) suits voluntarily. It's his funeral. See"
    " also {lobotomy}.\n\n   :psychedelicware: /si:`k@\u00b7del'\u00b7ik\u00b7weir/, n.\n\n   [UK] Syn. "
    "{display hack}. See also {smoking clover}.\n\n   :psyton: /si:'ton/, n.\n\n   [TMRC] The elementary "
    "particle carrying the si"
    "nister force. The\n   probability of a process losing is proportional to the number of psytons\n   fal"
    "ling on it. Psytons are generated by observers, which is why demos are\n   more likely to fail when l"
    "ots of people are watching. [This term appears\n   to have been largely superseded by {bogon}; see al"
    "so {quantum\n   bogodynamics"
)


def test_a_definition_taken_from_the_neighbouring_entry_is_unsupported_near_the_subject():
    question = "What is a psyton?"
    # The chat model's answer: the definition of the entry before, given to the psyton.
    made_up = ("A psyton is a person who has decided to be in management or administration and begins "
               "wearing ties, sport coats, and (shudder!) suits voluntarily. It's his funeral. See also "
               "{lobotomy}.")
    right = "A psyton is the elementary particle carrying the sinister force; demos fail when people watch."
    assert subject_words(made_up, question) == ["psyton"]
    # Every claim word of the made-up answer is in the memory: the word channel cannot tell them apart.
    assert (
        attribute(made_up, [JARGON], scorer=WordSupport(), threshold=0.5, question=question).grounding == 1.0
    )
    window = SubjectWindowSupport(15)
    result = attribute(made_up, [JARGON], scorer=window, threshold=0.5, question=question)
    # Its first sentence is unsupported near the psyton; "See also {lobotomy}." has no subject and
    # is in the memory ("It's his funeral." states nothing checkable): partly grounded, where the word
    # channel says grounded.
    assert [(c.claim, c.supported) for c in result.sentences] == [(True, False), (False, False), (True, True)]
    assert result.grounding == 0.5 and grounding_word(result.grounding) == "partly"
    assert attribute(right, [JARGON], scorer=window, threshold=0.5, question=question).grounding == 1.0
    # A sentence without a subject is checked against the whole memory.
    other = "Demos fail when lots of people are watching."
    assert window.scores([claim_words(other, question)], [JARGON], [[]])[0, 0] == 1.0
    with pytest.raises(ValueError, match="window"):
        SubjectWindowSupport(0)


def test_a_named_value_alone_is_a_claim_and_numbers_are_claim_words():
    assert claim_tokens("It is 1 of 256 slots, the M_MMAP_THRESHOLD.") == [
        "1",
        "256",
        "slots",
        "m_mmap_threshold",
    ]
    assert is_claim("`MLOCK_ONFAULT`.", ["mlock_onfault"])
    assert is_claim("It is 256.", ["256"])
    # Options, file names and paths are named values too (the model's one-word answers).
    assert is_claim("It is -rdynamic.", ["rdynamic"])
    assert is_claim("It preloads libmemusage.so.", ["libmemusage"])
    assert is_claim("Under /dev/shm.", ["shm"])
    assert not is_claim("Fine.", ["fine"]) and not is_claim("Yes, e.g.", ["yes"])
    assert not is_claim("Sure!", ["sure"])
    assert not is_claim("Done.", [])


GETENTROPY = ("getentropy() writes length bytes of high-quality random data to the buffer starting at the "
              "location pointed to by buffer.  The maximum permitted value for the length argument is 256.")
MEMFD = (
    "memfd_create() creates an anonymous file.  The name supplied in name is used as a filename and "
    "will be displayed as the target of the corresponding symbolic link.  The name is limited to 249 bytes."
)


def test_a_memory_that_does_not_mention_what_the_question_names_supports_nothing():
    question = "What is the maximum length of the name passed to memfd_create()?"
    assert asked_names(question) == {"memfd_create"}
    assert asked_names("What is mode 2 of the sysctl?") == set()  # a number names nothing
    assert asked_names("What does mincore( ) fill?") == {"mincore"}
    # The 0.5B model's answer when the retrieval missed memfd_create's page: getentropy's 256, beside
    # "maximum" and "length" in the memory, but memfd_create is not in it.
    made_up = "The maximum length of the name passed to memfd_create() is 256."
    window = SubjectWindowSupport(15)
    assert (
        window.scores([claim_words(made_up, question)], [GETENTROPY], [subject_words(made_up, question)])[
            0, 0
        ]
        == 1.0
    )
    result = attribute(made_up, [GETENTROPY, MEMFD], scorer=window, threshold=0.5, question=question)
    assert (
        result.sentences[0].scores[0] == 0.0 and not result.sentences[0].supported and result.grounding == 0.0
    )
    right = "The name passed to memfd_create() can be up to 249 bytes long."
    assert (
        attribute(right, [GETENTROPY, MEMFD], scorer=window, threshold=0.5, question=question).grounding
        == 1.0
    )
    # Without a question, or one that names nothing, every memory may support.
    assert attribute(made_up, [GETENTROPY], scorer=window, threshold=0.5).grounding == 1.0
    # A name inside a longer one is mentioned: a chunk of sync_file_range's page naming only its flag.
    assert mentions("SYNC_FILE_RANGE_WAIT_BEFORE  Wait upon write-out", {"sync_file_range"})
    assert not mentions(GETENTROPY, {"memfd_create"}) and mentions(GETENTROPY, set())


def test_a_named_value_may_stand_just_before_the_subject_as_a_flag_before_its_description():
    question = ("Which sync_file_range() flag waits for pages already submitted for write-out before "
                "performing any write?")
    memory = (
        "SYNC_FILE_RANGE_WAIT_BEFORE\n       Wait upon write-out of all pages in the specified range that "
        "have already been submitted to the device driver for write-out before performing any write."
    )
    answer = (
        "The sync_file_range() flag that waits for pages already submitted is `SYNC_FILE_RANGE_WAIT_BEFORE`."
    )
    assert claim_words(answer, question) == ["sync_file_range_wait_before"]
    assert (
        attribute(
            answer, [memory], scorer=SubjectWindowSupport(15), threshold=0.5, question=question
        ).grounding
        == 1.0
    )
    # Without `before`, the flag before the subject is not counted; nor is a plain word with it.
    assert attribute(answer, [memory], scorer=SubjectWindowSupport(15, before=0), threshold=0.5,
                     question=question).grounding == 0.0
    assert (
        SubjectWindowSupport(15).scores([["device", "drivers"]], ["device drivers pages"], [["pages"]])[0, 0]
        == 0.0
    )
    with pytest.raises(ValueError, match="before"):
        SubjectWindowSupport(15, before=-1)


# A memory of Documentation/networking/tls.rst (linux-doc-6.1) as the kernel set primes it: two
# options, each named and then described.
TLS_OPTIONS = (
    "are certain condition-specific optimizations the TLS ULP can make,\nif requested. Those "
    "optimizations are either not universally beneficial\nor may impact correctness, hence they require "
    "an opt-in.\nAll options are set per-socket using setsockopt(), and their\nstate can be checked using "
    "getsockopt() and via socket diag (``ss``).\n\nTLS_TX_ZEROCOPY_RO\n~~~~~~~~~~~~~~~~~~\n\nFor device "
    "offload only. Allow sendfile() data to be transmitted directly\nto the NIC without making an "
    "in-kernel copy. This allows true zero-copy\nbehavior when device offload is enabled.\n\nThe "
    "application must make sure that the data is not modified between being\nsubmitted and transmission "
    "completing. In other words this is mostly\napplicable if the data sent on a socket via sendfile() "
    "is read-only.\n\nModifying the data may result in different versions of the data being used\nfor "
    "the original TCP transmission and TCP retransmissions. To the receiver\nthis will look like TLS "
    "records had been tampered with and will result\nin record authentication failures.\n\n"
    "TLS_RX_EXPECT_NO_PAD\n~~~~~~~~~~~~~~~~~~~~\n\nTLS 1.3 only. Expect the sender to not pad records. "
    "This allows the data"
)


def test_a_value_taken_from_the_wrong_line_of_a_list_is_unsupported():
    question = ("Which kTLS socket option, for TLS 1.3 only, tells the kernel to expect the sender not to "
                "pad records?")
    window = SubjectWindowSupport(15)
    # The 0.5B model's answer: the option listed before the right one. Its words are all in the
    # memory, near the subject; the memory describes TLS_RX_EXPECT_NO_PAD in the question's words.
    wrong = ("The kTLS socket option `TLS_TX_ZEROCOPY_RO` tells the kernel to expect the sender not to pad "
             "records.")
    right = ("The kTLS socket option `TLS_RX_EXPECT_NO_PAD` tells the kernel to expect the sender not to pad "
             "records.")
    assert (
        window.scores([claim_words(wrong, question)], [TLS_OPTIONS], [subject_words(wrong, question)])[0, 0]
        == 1.0
    )
    assert attribute(wrong, [TLS_OPTIONS], scorer=window, threshold=0.5, question=question).grounding == 0.0
    assert attribute("`TLS_TX_ZEROCOPY_RO`", [TLS_OPTIONS], scorer=window, threshold=0.5,
                     question=question).grounding == 0.0
    assert attribute(right, [TLS_OPTIONS], scorer=window, threshold=0.5, question=question).grounding == 1.0
    # The rule itself: a rival described in RIVAL_MARGIN more of the question's words, no fewer.
    asked = {"expect", "sender", "pad", "records", "kernel"}
    memory = claim_tokens("rx_one expect sender pad records kernel. tx_two expect other words entirely")
    assert misbound_values({"tx_two"}, memory, asked)  # 5 against 1
    assert not misbound_values({"rx_one"}, memory, asked)
    assert not misbound_values({"absent_value"}, memory, asked)  # not in the memory: nothing to say
    close = claim_tokens("rx_one expect sender pad records. tx_two expect other words entirely")
    assert not misbound_values({"tx_two"}, close, asked)  # 4 against 1: within the margin


@pytest.mark.parametrize(("grounding", "word"), [(None, ""), (0.0, "not grounded"), (0.24, "not grounded"),
                                                 (0.25, "partly"), (0.59, "partly"), (0.6, "grounded"),
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
