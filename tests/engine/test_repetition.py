"""engine.repetition: loops are caught while streaming, ordinary answers are not."""

from __future__ import annotations

import random

import pytest

from engine.repetition import RepetitionGuard


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


@pytest.mark.parametrize("unit", ["ha", "na na ", "1 2 3 4 ", "我们", "~`{|}"])
def test_short_periods_are_loops(unit):
    guard = RepetitionGuard()
    assert _stream(guard, "Sure: " + unit * 400, 5) is not None
    assert guard.kept.startswith("Sure:") and len(guard.kept) < 20 + len(unit)


def test_a_line_repeated_among_varied_lines_is_a_loop():
    text = "".join(f"Step {n}: check the value.\nThe value is stored in the cache for later.\n" for n in range(12))
    guard = RepetitionGuard()
    assert _stream(guard, text, 4) is not None
    assert guard.kept.count("The value is stored in the cache for later.") == 1


@pytest.mark.parametrize("text", [
    "-" * 600 + "\n" + "=" * 300,                                              # rules, no letters
    "| " + "--- | " * 80 + "\n",                                                  # a wide table's separator
    "".join(f"│ {n:<6}│ entry number {n} │\n├───────┼──────────────────┤\n" for n in range(20)),  # boxed table
    "".join(f"{n}. Item number {n} is described here in its own words.\n" for n in range(60)),  # a numbered list
    "| a | b |\n|---|---|\n" + "".join(f"| {n} | {n * n} |\n" for n in range(80)),           # a table
    "def f(x):\n    return x\n\n\ndef g(y):\n    return y\n" * 2,                               # code, twice
])
def test_ordinary_answers_are_not_loops(text):
    assert _stream(RepetitionGuard(), text, 3) is None


def test_random_prose_is_never_a_loop():
    rng = random.Random(3)
    words = ["memory", "river", "lantern", "orbit", "quiet", "granite", "velvet", "signal", "harbor", "meadow", "the", "a", "of", "and"]
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
