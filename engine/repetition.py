"""Detects an answer that has fallen into a loop, while it streams.

Small models sometimes repeat one phrase, line or paragraph until the token cap. `RepetitionGuard`
is fed the streamed text and reports a loop as soon as the tail of the answer is either

* **periodic**: its last `min_chars` characters repeat with some period `p <= max_period` (for a
  short unit, `short_repeats` copies of it suffice, at least `short_chars` characters; a unit over
  400 characters, such as an explanation and its example written again word for word, must repeat
  over three fifths of its length), and
  the repeated unit holds a letter or digit, or at least three distinct non-blank characters (a
  long rule of "-----" or a wide table's "| --- " separator is not a loop; "~`{|}" over and
  over in a string literal, seen in `bench.answers`, is), or
* **a repeated line**: one line of at least `min_line_chars` characters, a letter or digit among
  them, occurs `max_line_repeats` times among the last `line_window` lines (a loop whose lines
  differ a little in between; a table's repeated "├───┼───┤" rule is not one).

Each check is a few C-level slice comparisons and one search for an earlier copy of the tail, so
a token costs microseconds.
On a loop, `kept` is the answer up to the end of the first occurrence of what repeats (cut back to a
line or sentence end where one is near): what the user sees is the answer without its echo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engine.lexical import STOP_WORDS

_WORD = re.compile(r"\w+")
# A quoted or backticked value: what an answer names, even when it is a common word ("all").
_QUOTED = re.compile(r"[\"'`\u201c\u2018]([^\"'`\u201d\u2019\n]{1,40})[\"'`\u201d\u2019]")
# An answer restates its question when it brings no word of its own (`_new_content`) and it is at
# most RESTATED_LENGTH times the question's length (plus RESTATED_SLACK words).
RESTATED_LENGTH = 1.5
RESTATED_SLACK = 3


def _new_content(asked: set[str], answer_words: list[str], answer: str) -> list[str]:
    """The answer's words (`answer_words`, lowercased) not `asked` that say something: not function
    words (`engine.lexical.STOP_WORDS`) nor single letters ("n." is an abbreviation copied from a
    glossary entry), but any number ("is 32.") and any quoted or backticked value of `answer`."""
    quoted = {word for value in _QUOTED.findall(answer) for word in _WORD.findall(value.lower())}
    return [word for word in answer_words if word not in asked
            and (word in quoted or word.isdigit() or (len(word) > 1 and word not in STOP_WORDS))]


def restates_question(question: str, answer: str) -> bool:
    """Whether `answer` says nothing but its question again. Seen: asked about the MPL 2.0's cure
    period with the right memory retrieved first, the 0.5B chat model answered with the question
    itself; asked which flag or type does something, it wrote "The `kcmp()` type checks whether ..."
    with the question's own words. An answer that uses the question's words to say something ("The
    maximum length of the name passed to memfd_create() is 32.", seen flagged by an earlier rule that
    allowed one new word in ten) brings a word of its own and is not one; nor is an answer of one or
    two words ("Yes.")."""
    answer_words = _WORD.findall(answer.lower())
    question_words = _WORD.findall(question.lower())
    if len(answer_words) < 3 or not question_words:
        return False
    return (len(answer_words) <= RESTATED_LENGTH * len(question_words) + RESTATED_SLACK
            and not _new_content(set(question_words), answer_words, answer))


@dataclass
class RepetitionGuard:
    min_chars: int = 240
    max_period: int = 1000
    short_chars: int = 80
    short_repeats: int = 16
    min_line_chars: int = 24
    max_line_repeats: int = 4
    line_window: int = 24
    text: str = field(default="", init=False)
    looping: bool = field(default=False, init=False)
    kept: str = field(default="", init=False)

    def __post_init__(self) -> None:
        if self.min_chars < 8 or self.max_period < 1 or self.max_line_repeats < 2 or self.line_window < 2:
            raise ValueError("RepetitionGuard: min_chars >= 8, max_period >= 1, max_line_repeats >= 2, "
                             "line_window >= 2")

    def feed(self, delta: str) -> bool:
        """Add streamed text; True once the answer is looping (and from then on)."""
        if self.looping:
            return True
        self.text += delta
        period = self._period()
        if period:
            # The loop started where the periodic tail began; keep one copy of its unit.
            start = self._periodic_start(period)
            self.kept = _at_boundary(self.text[:start + period], after=start).rstrip()
            self.looping = True
        elif "\n" in delta:
            cut = self._repeated_line_cut()
            if cut is not None:
                self.kept = self.text[:cut].rstrip()
                self.looping = True
        return self.looping

    def _span(self, period: int) -> int:
        """How long a periodic tail must be: `min_chars`, or for a short unit `short_repeats` copies
        of it (at least `short_chars`), so that a loop of a few dense tokens is caught before the cap;
        for a long unit three fifths of it (from 400 characters on), so that a passage quoted twice
        a page apart, such as one code example's setup in the next, is not a loop."""
        return max(min(self.min_chars, max(self.short_chars, period * self.short_repeats)), period * 3 // 5)

    def _period(self) -> int:
        text, span = self.text, self.min_chars
        period = 1
        # Short units: `short_repeats` copies (at least `short_chars` characters) are a loop.
        while period <= self.max_period and (short := self._span(period)) < span:
            if len(text) < short + period:
                return 0
            if text[-short - period:-period] == text[-short:] and _meaningful(text[-period:]):
                return period
            period += 1
        # Longer units: the last `_span(p)` characters (`min_chars`, more for the longest units)
        # repeat with a period p. Every such p is where the last `min_chars` characters occurred
        # before, so one C-level search per candidate, nearest first, finds them.
        if len(text) < span + period:
            return 0
        tail, base = text[-span:], len(text) - span
        end, lowest = base - period + span, max(0, base - self.max_period)
        while (start := text.rfind(tail, lowest, end)) >= 0:
            candidate = base - start
            longer = self._span(candidate)
            if (longer == span or (len(text) >= longer + candidate
                                   and text[-longer - candidate:-candidate] == text[-longer:])) \
                    and _meaningful(text[-candidate:]):
                return candidate
            end = start + span - 1
        return 0

    def _periodic_start(self, period: int) -> int:
        """Index where the text stops being `period`-periodic, walking back from the end."""
        text = self.text
        start = len(text) - self._span(period) - period
        while start > 0 and text[start - 1] == text[start - 1 + period]:
            start -= 1
        return start

    def _repeated_line_cut(self) -> int | None:
        """End of the first occurrence of a line repeated too often in the recent window, or None."""
        complete = self.text[:self.text.rfind("\n")]
        lines = complete.split("\n")
        window = lines[-self.line_window:]
        counts: dict[str, int] = {}
        for line in window:
            key = " ".join(line.split())
            if len(key) >= self.min_line_chars and any(c.isalnum() for c in key):  # not a table's rule
                counts[key] = counts.get(key, 0) + 1
                if counts[key] >= self.max_line_repeats:
                    offset = len("\n".join(lines[:len(lines) - len(window)]))
                    first = next(
                        i for i, candidate in enumerate(window) if " ".join(candidate.split()) == key
                    )
                    return offset + len("\n".join(window[:first + 1])) + (1 if offset else 0)
        return None


def _meaningful(unit: str) -> bool:
    """Whether a repeated unit is text rather than a rule: a letter or digit, or 3+ distinct marks."""
    return any(c.isalnum() for c in unit) or len(set(unit) - set(" \t\n")) >= 3


def _at_boundary(text: str, *, after: int) -> str:
    """`text` cut back to its last line or sentence end, when that lies beyond index `after`."""
    cut = max(text.rfind("\n"), *(text.rfind(end) + 1 for end in (". ", "! ", "? ")))
    return text[:cut] if cut > after else text
