"""The history policy (engine.llm.history): what of the earlier turns enters the next prompt."""

from __future__ import annotations

import pytest

from engine.config import HISTORY_POLICIES, Config
from engine.llm.history import answer_lead, follow_up_query, history_for_prompt

CSV_ANSWER = """To read rows from a CSV file, use `csv.reader`. It returns an iterator over the rows. \
You can also use `csv.DictReader` to get each row as a dictionary.

```python
import csv
with open("data.csv", newline="") as handle:
    for row in csv.reader(handle):
        print(row)
```

Each row is a list of the fields on one line."""
NONLOCAL_ANSWER = "The nonlocal statement makes a name refer to the binding in the nearest enclosing scope."
HISTORY = [("user", "How do I read rows from a CSV file?"), ("assistant", CSV_ANSWER),
           ("user", "What does the nonlocal statement do?"), ("assistant", NONLOCAL_ANSWER)]


def test_whole_keeps_every_exchange_as_it_was_said():
    assert history_for_prompt(HISTORY, "whole") == HISTORY


def test_lead_keeps_the_questions_and_each_answers_first_sentences_without_its_code():
    kept = history_for_prompt(HISTORY, "lead")
    assert [role for role, _ in kept] == ["user", "assistant", "user", "assistant"]
    assert [text for role, text in kept if role == "user"] == [HISTORY[0][1], HISTORY[2][1]]
    assert kept[1][1] == ("To read rows from a CSV file, use `csv.reader`. "
                          "It returns an iterator over the rows.")
    assert "```" not in kept[1][1] and "csv.reader(handle)" not in kept[1][1]
    assert kept[3][1] == NONLOCAL_ANSWER


def test_an_answer_that_begins_with_code_leaves_only_its_question():
    history = [("user", "Show me a CSV reader."), ("assistant", "```python\nimport csv\n```\nThat is all.")]
    assert answer_lead(history[1][1]) == ""
    assert history_for_prompt(history, "lead") == [history[0]]


def test_a_lead_cut_before_its_code_ends_as_a_sentence():
    assert answer_lead("Here is how you do it:\n\n```python\nprint(1)\n```") == "Here is how you do it."


def test_questions_keeps_only_the_earlier_questions():
    assert history_for_prompt(HISTORY, "questions") == [HISTORY[0], HISTORY[2]]


def test_last_keeps_only_the_last_exchange():
    assert history_for_prompt(HISTORY, "last") == HISTORY[2:]
    assert history_for_prompt([], "last") == []


def test_an_unknown_policy_is_a_clear_error_in_the_config_and_the_function():
    with pytest.raises(ValueError, match="history_policy must be one of whole, lead, questions, last"):
        Config(history_policy="everything")
    with pytest.raises(ValueError, match="got 'everything'"):
        history_for_prompt(HISTORY, "everything")
    assert Config().history_policy in HISTORY_POLICIES


def test_a_follow_ups_search_text_starts_with_the_previous_question():
    assert follow_up_query(HISTORY, "And how do I write them back?") == (
        "What does the nonlocal statement do?\nAnd how do I write them back?")
    assert follow_up_query([], "How do I read rows from a CSV file?") == "How do I read rows from a CSV file?"


def test_a_short_answer_without_code_is_kept_as_it_was_said():
    assert answer_lead(NONLOCAL_ANSWER + " ") == NONLOCAL_ANSWER + " "
