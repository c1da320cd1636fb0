"""engine.repetition: loops are caught while streaming, ordinary answers are not."""

from __future__ import annotations

import random

import pytest

from engine.repetition import RepetitionGuard, restates_question


def _stream(guard: RepetitionGuard, text: str, step: int) -> int | None:
    """Feed `text` in pieces of `step` characters; the offset at which a loop was reported."""
    for offset in range(0, len(text), step):
        if guard.feed(text[offset:offset + step]):
            return offset
    return None


ANSWER = ("The else clause of a for loop runs when the loop finishes without a break.\n\n"
          "It does not run when the loop is left by break, return or an exception.\n\n")
LOOP = "The else clause runs when the loop body is not executed.\n\n"


@pytest.mark.parametrize("step", [1, 3, 7, 40])
def test_a_repeated_paragraph_is_caught_early_and_cut_after_its_first_copy(step):
    guard = RepetitionGuard()
    at = _stream(guard, ANSWER + LOOP * 20, step)
    assert at is not None and at < len(ANSWER) + len(LOOP) * 6  # caught within a few copies
    assert guard.looping and guard.kept == (ANSWER + LOOP).rstrip()


# A cycle of about 800 characters, as bench.answers saw the model alone write (an explanation and an
# example, then both again, word for word, until the cap).
CYCLE = (
    "The nonlocal statement makes a name refer to the binding in the nearest enclosing function scope, "
    "so an assignment in the inner function changes the outer variable instead of creating a local one.\n\n"
    "Here's an example:\n\n```python\ndef outer():\n    count = 0\n\n    def inner():\n        nonlocal "
    "count\n"
    "        count += 1\n        return count\n\n    return inner\n\n\ncounter = outer()\n"
    "print(counter())  # 1\nprint(counter())  # 2\n```\n\n"
    "In this example, inner changes count in outer's scope, and each call sees the value the last one left. "
    "Without nonlocal, count += 1 would raise UnboundLocalError, because the assignment makes count "
    "local.\n\n"
)


@pytest.mark.parametrize("step", [1, 4, 9])
def test_a_long_cycle_repeated_word_for_word_is_a_loop(step):
    assert 600 < len(CYCLE) < RepetitionGuard().max_period
    guard = RepetitionGuard()
    at = _stream(guard, ANSWER + CYCLE * 4, step)
    assert at is not None and at < len(ANSWER) + len(CYCLE) * 2  # within the second copy
    # One copy is kept, cut back to its last sentence end (the cycle's last sentence runs on into the
    # second copy's first line).
    assert (ANSWER + CYCLE).startswith(guard.kept) and guard.kept.endswith(".")
    assert len(ANSWER + CYCLE) - 150 < len(guard.kept) and guard.kept.count("nonlocal count") == 1


def test_a_passage_quoted_twice_a_page_apart_is_not_a_loop():
    # One example's 300-character setup reused in the next, with different text around it: a
    # period of ~800 characters over which only 300 repeat (a long unit must repeat over 3/5 of it).
    setup = CYCLE[CYCLE.index("```python"):][:300]
    text = ANSWER + setup + "\n" + CYCLE[:450] + "\nA second example builds on the first:\n\n" + setup + \
        "\nprint('done')\n```\nThat is all there is to it.\n"
    assert _stream(RepetitionGuard(), text, 3) is None


@pytest.mark.parametrize("unit", ["ha", "na na ", "1 2 3 4 ", "我们", "~`{|}"])
def test_short_periods_are_loops(unit):
    guard = RepetitionGuard()
    assert _stream(guard, "Sure: " + unit * 400, 5) is not None
    assert guard.kept.startswith("Sure:") and len(guard.kept) < 20 + len(unit)


def test_a_line_repeated_among_varied_lines_is_a_loop():
    text = "".join(
        f"Step {n}: check the value.\nThe value is stored in the cache for later.\n" for n in range(12)
    )
    guard = RepetitionGuard()
    assert _stream(guard, text, 4) is not None
    assert guard.kept.count("The value is stored in the cache for later.") == 1


@pytest.mark.parametrize(
    "text",
    [
        "-" * 600 + "\n" + "=" * 300,  # rules, no letters
        "| " + "--- | " * 80 + "\n",  # a wide table's separator
        "".join(
            f"│ {n:<6}│ entry number {n} │\n├───────┼──────────────────┤\n" for n in range(20)
        ),  # boxed table
        "".join(
            f"{n}. Item number {n} is described here in its own words.\n" for n in range(60)
        ),  # a numbered list
        "| a | b |\n|---|---|\n" + "".join(f"| {n} | {n * n} |\n" for n in range(80)),  # a table
        "def f(x):\n    return x\n\n\ndef g(y):\n    return y\n" * 2,  # code, twice
    ],
)
def test_ordinary_answers_are_not_loops(text):
    assert _stream(RepetitionGuard(), text, 3) is None


def test_random_prose_is_never_a_loop():
    rng = random.Random(3)
    words = [
        "memory",
        "river",
        "lantern",
        "orbit",
        "quiet",
        "granite",
        "velvet",
        "signal",
        "harbor",
        "meadow",
        "the",
        "a",
        "of",
        "and",
    ]
    text = " ".join(rng.choice(words) for _ in range(3000))
    assert _stream(RepetitionGuard(), text, 6) is None


def test_once_looping_it_stays_looping_and_ignores_more_text():
    guard = RepetitionGuard()
    _stream(guard, "ab" * 300, 10)
    kept = guard.kept
    assert guard.feed("something new") and guard.kept == kept


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        RepetitionGuard(min_chars=2)
    with pytest.raises(ValueError):
        RepetitionGuard(max_line_repeats=1)


@pytest.mark.parametrize(
    ("answer", "restated"),
    [
        ("What is the cure period of the MPL 2.0 after a notice of non-compliance?", True),
        ("What is the cure period of the MPL 2.0?", True),
        ("The cure period of the MPL 2.0 after a notice of non-compliance.", True),
        (
            "The cure period of the MPL 2.0 is 30 days after the notice.",
            False,
        ),  # an answer in the question's words
        ("Thirty days.", False),
        ("Yes.", False),
        ("", False),
    ],
)
def test_an_answer_that_restates_its_question(answer, restated):
    question = "What is the cure period of the MPL 2.0 after a notice of non-compliance?"
    assert restates_question(question, answer) is restated


# Answers of bench.answers (the 0.5B chat model with memories, 2026-11-26): the first six restate
# their question; the last five answer it in its words, and all five were marked as loops by a rule
# that allowed one new word in ten (three of them are right: 32, 10 and 256).
@pytest.mark.parametrize(
    ("question", "answer", "restated"),
    [
        ("What is creeping elegance?", "Creeping elegance is n.", True),
        ("What are drop-ins on a terminal?", "drop-ins: n.", True),
        (
            "Which glibc versions shipped a broken pldd that just hung when it was run?",
            "The glibc versions shipped a broken pldd that just hung when it was run.",
            True,
        ),
        (
            "Which kcmp() type checks whether two processes share the same address space?",
            "The `kcmp()` type checks whether two processes share the same address space.",
            True,
        ),
        (
            "Which sync_file_range() flag waits for pages already submitted for write-out before performing "
            "any write?",
            "sync_file_range() flag waits for pages already submitted for write-out before performing any "
            "write.",
            True,
        ),
        (
            "Which Landlock system call enforces a ruleset on the calling thread?",
            "The Landlock system call enforces a ruleset on the calling thread.",
            True,
        ),
        (
            "What is the maximum length of the name passed to memfd_create()?",
            "The maximum length of the name passed to memfd_create() is 32.",
            False,
        ),
        (
            "What is the largest value resolv.conf accepts for the ndots option?",
            "The largest value resolv.conf accepts for the ndots option is 10.",
            False,
        ),
        (
            "What is the default system-wide limit on the number of POSIX message queues (queues_max)?",
            "The default system-wide limit on the number of POSIX message queues (queues_max) is 256.",
            False,
        ),
        ("Which book is the Cinderella Book?", "The Cinderella Book is the Aluminum Book.", False),
        (
            "Which Landlock system call enforces a ruleset on the calling thread?",
            "The Landlock system call `sys_call` enforces a ruleset on the calling thread.",
            False,
        ),
    ],
)
def test_an_answer_in_the_questions_words_restates_it_only_when_it_adds_nothing(question, answer, restated):
    assert restates_question(question, answer) is restated
