"""bench/answer_chains.py: the copy judge of the multi-turn mode, and its chains' facts (each in the
demo corpus, as the bench checks before it asks)."""

from __future__ import annotations

import pytest

from bench.answer_chains import load_chains, repeats

CSV_ANSWER = """You can use `csv.reader` to read the rows of a CSV file one by one, as lists of strings.

```python
import csv
with open("data.csv", newline="") as handle:
    for row in csv.reader(handle):
        print(row)
```"""


def test_an_answer_that_reuses_an_earlier_code_block_repeats_it():
    later = """The nonlocal statement rebinds a name of the enclosing scope. For example:

```python
with open("data.csv", newline="") as handle:
    for row in csv.reader(handle):
        print(row)
```"""
    assert repeats(later, [CSV_ANSWER])


def test_an_answer_that_reuses_an_earlier_sentence_repeats_it():
    later = ("Nonlocal names a variable. You can use csv.reader to read the rows of a CSV file one by one, "
             "as lists of strings.")
    assert repeats(later, [CSV_ANSWER])


def test_an_answer_on_its_own_topic_repeats_nothing():
    later = """The nonlocal statement makes a name refer to the nearest enclosing function's binding.

```python
def outer():
    count = 0
    def inner():
        nonlocal count
        count += 1
```
Here is an example:"""
    # "import csv" and "Here is an example:" are too short to count as a copy.
    assert not repeats(later, [CSV_ANSWER, "Here is an example: import csv"])


@pytest.mark.slow
def test_the_chains_facts_are_in_the_demo_corpus_and_both_kinds_have_a_held_out_part():
    chains = load_chains("all")  # SystemExit naming the missing facts otherwise
    assert all(len(chain["turns"]) == 3 for chain in chains)
    held_out = {chain["kind"] for chain in chains if chain["split"] == "held-out"}
    assert held_out == {"unrelated", "follow-up"}
    assert len(load_chains("dev")) + len(load_chains("held-out")) == len(chains)
