"""A question that calls a name is answered from the memory that defines exactly that name, and one
that asks what a term is from the memory that heads that term (not an index listing it)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from corpus.demo import pydoc_topics, stdlib_docstrings
from engine.build import build_index
from engine.channels import FIRST, WORDS, SearchTarget
from engine.config import Config
from engine.gate import channel_evidence
from engine.lexical import WordIndex
from engine.loaded_build import load_corpus
from engine.query_names import asked_term, called_names, definer, defines, heads, quoted
from engine.retrieval import Retriever
from engine.stages import bind, first_stage


@pytest.mark.parametrize(("query", "names"), [
    ("What does the zip() function return?", ("zip",)),
    ("how do I call os.path.join() on two parts", ("os.path.join",)),
    ("open(path) and then read()", ("open", "read")),
    ("what is mincore( )?", ("mincore",)),
    ("Zip files and ZIP archives", ()),
    ("a call (with words in parentheses) is not a name", ()),
    ("zip() asked twice: zip()", ("zip",)),
])
def test_called_names(query, names):
    assert called_names(query) == names


@pytest.mark.parametrize(("text", "names", "expected"), [
    ("builtins.zip\n\nzip(*iterables, strict=False) --> Yield tuples", ("zip",), True),
    ("zip(*iterables, strict=False) --> Yield tuples until an input is exhausted.", ("zip",), True),
    ("zip - package and compress (archive) files", ("zip",), True),
    ("zip: the built-in", ("zip",), True),
    ("zipfile.ZipFile\n\nClass with methods to open, read, write, close, list zip files.", ("zip",), False),
    ("Zip files are archives; zip() is something else.", ("zip",), False),
    ("module zipfile\n\nRead and write ZIP files.", ("zip",), False),
    ("os.path.join\n\nJoin two or more pathname components", ("os.path.join",), True),
    ("posixpath.join\n\nJoin two or more pathname components", ("os.path.join",), False),
    ("builtins.zip", (), False),
])
def test_defines(text, names, expected):
    assert defines(text, names) is expected


def _reference_defines(text: str, names: tuple[str, ...]) -> bool:
    """The rule spelled out word by word: the first line's first token, cut at "(" or ":", is the
    name or ends in "." + name, and nothing but "(", "-" or ":" follows it on that line."""
    line = text[:200].split("\n", 1)[0].lstrip()
    token = ""
    for char in line:
        if char.isalnum() or char in "._":
            token += char
        else:
            break
    if not token or not (token[0].isalpha() or token[0] == "_") or token.endswith(".") or ".." in token:
        return False
    if any(part and not (part[0].isalpha() or part[0] == "_") for part in token.split(".")[1:]):
        return False
    rest = line[len(token):]
    if rest.strip() and not rest.lstrip().startswith(("(", "-", ":")):
        return False
    return any(token.lower() == name or token.lower().endswith("." + name) for name in names)


@pytest.mark.parametrize("seed", range(5))
def test_defines_matches_the_spelled_out_rule_on_random_heads(seed):
    rng = random.Random(seed)
    parts = ["zip", "builtins", "os", "path", "join", "Zip", "zipfile", "_x", "9a", ""]
    tails = ["", "\nbody", "(*args)", " - a tool", ": x", " is a word", " (x)", "  ", ".", "!"]
    for _ in range(400):
        head = ".".join(rng.choice(parts) for _ in range(rng.randint(1, 3)))
        text = rng.choice(["", " "]) + head + rng.choice(tails)
        names = tuple(rng.sample(["zip", "join", "os.path.join", "path"], rng.randint(0, 2)))
        assert defines(text, names) == _reference_defines(text, names), (text, names)


# The demo corpus's part that a question about zip() competes in: the built-ins, the archive and
# iteration modules (full of "zip"), and the language reference.
DEMO_MODULES = [
    "builtins",
    "zipfile",
    "gzip",
    "tarfile",
    "zlib",
    "shutil",
    "itertools",
    "functools",
    "operator",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory, gemma_gguf, tokenizer, embedding_cache):  # noqa: ANN201
    root = tmp_path_factory.mktemp("demo")
    dataset = root / "demo.jsonl"
    records = [*pydoc_topics(), *stdlib_docstrings(DEMO_MODULES)]
    dataset.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    build_index(
        datasets=[(1, "demo", dataset)],
        out_dir=root / "build",
        gguf_path=gemma_gguf,
        tokenizer=tokenizer,
        config=Config(),
        cache_dir=Path(embedding_cache),
    )
    corpus = load_corpus(root / "build")
    texts = corpus.store.get_memories(list(range(corpus.count)))
    words = WordIndex.build(texts[row].text for row in range(corpus.count))
    retriever = Retriever(tokenizer, Config())
    target = SearchTarget(corpus, corpus.store, "demo", channels={WORDS: words})
    rule = channel_evidence(retriever=retriever, target=target, channel=WORDS)
    return retriever, SearchTarget(corpus, corpus.store, "demo", channels={WORDS: words}, rules={WORDS: rule})


@pytest.mark.slow  # the demo corpus's build
@pytest.mark.parametrize(("question", "head"), [
    ("What does the zip() function return?", "builtins.zip"),
    ("What does sorted() return?", "builtins.sorted"),
    ("What does itertools.chain() do?", "itertools.chain"),
])
def test_the_demo_corpus_answers_a_called_name_from_its_own_docstring(demo, question, head):
    retriever, target = demo
    results = retriever.search(question, [target])
    assert results, question
    assert results[0].memory.text.split("\n", 1)[0] == head, [r.memory.text[:60] for r in results[:5]]
    ranked = retriever.rank_rows(question, target)
    assert target.store.get_memories([int(ranked[0])])[int(ranked[0])].text.startswith(head)


@pytest.mark.slow  # the demo corpus's build
def test_a_question_without_a_called_name_ranks_as_before(demo):
    retriever, target = demo
    question = "What does the zip function return?"
    assert called_names(question) == () and asked_term(question) is None and definer(question) is None
    ranked = retriever.rank_rows(question, target)
    candidates = _hdc_candidates(retriever, target, question)
    fused = first_stage([target], bind([target], question, FIRST), candidates,
                        [retriever.query_vector(target.corpus, question)])
    order = fused[0] if fused is not None else _hdc_candidates(retriever, target, question)
    assert np.array_equal(ranked, np.array([c.row for c in order]))


def _hdc_candidates(retriever, target, question):  # noqa: ANN001, ANN202
    from engine.ranking import Candidate

    q_pos, q_neg = retriever.query_vector(target.corpus, question)
    rows, scores = target.corpus.index.search_auto(
        q_pos, q_neg, min(retriever.candidates, target.corpus.count)
    )
    return sorted((Candidate(0, int(r), int(s)) for r, s in zip(rows, scores, strict=True)),
                  key=lambda c: (-c.score, c.row))


@pytest.mark.parametrize(("query", "term"), [
    ("What does IYFEG mean?", "iyfeg"),
    ("What is a mouso?", "mouso"),
    ("What are drop-ins on a terminal?", "drop-ins"),
    ("In scientific computation, what is a hidden flag?", "hidden flag"),
    ("What does 'examining the entrails' mean for a programmer?", "examining the entrails"),
    ("What does BWQ stand for?", "bwq"),
    ("What does the word 'boxen' mean?", "boxen"),
    ("What does the expletive pffft convey?", "pffft"),
    ("Who is a wheel?", "wheel"),
    ("What does it mean to blow an EPROM?", None),  # a pronoun, not a term
    ("What is the default value of /proc/sys/fs/pipe-max-size?", None),  # a property of something
    ("What is the largest value an eventfd counter can hold across all of its uses?", None),  # too long
    ("Which book is the Cinderella Book?", None),
    ("Jargonically, what does a hacker's uptime mean?", "hacker's uptime"),
    ("What's the user's home directory called?", None),  # apostrophes, no quotes
    ("How do I list files?", None),
])
def test_asked_term(query, term):
    assert asked_term(query) == term


@pytest.mark.parametrize(
    ("text", "term", "expected"),
    [
        (
            "whose venom\n\n   :mouso: /mow'soh/, n.\n\n   An error in mouse usage.",
            "mouso",
            True,
        ),  # a glossary entry
        ("BWQ: Buzz Word Quotient", "bwq", True),
        ("* hidden flag - an extra option", "hidden flag", True),
        ("  AT_RANDOM\n         The address of sixteen bytes containing a random value.", "at_random", True),
        ("Hidden flag\n===========\n\nText.", "hidden flag", True),  # a heading over its underline
        ("   buzzword-compliant\n\n   BWQ\n\n   by hand\n\n   byte\n", "bwq", False),  # an index's line
        ("The mouso is an error.", "mouso", False),  # prose that starts with the term
        ("See also {mouso}, {mouse ahead}.", "mouso", False),  # a mention
        ("mousoleum: not the term", "mouso", False),  # a longer word
        ("   mouso\n", "mouso", False),  # alone, with no text after it
    ],
)
def test_heads(text, term, expected):
    assert heads(text, term) is expected


GLOSSARY_INDEX = "\n\n   ".join(["Glossary index", "buzzword-compliant", "BWQ", "by hand", "byte", "byte sex",
                                    "mouse ahead", "mouso", "mung", "nybble", "nyetwork"])
# As a chunked book holds it: several entries to a memory, the index a memory of its own.
GLOSSARY = [
    GLOSSARY_INDEX,
    ":buzzword-compliant: adj.\n\n   Includes features to keep up with the latest buzzwords. See BWQ.\n\n"
    "   :BWQ: /B-W-Q/, n.\n\n   [IBM: abbreviation, Buzz Word Quotient] The percentage of buzzwords in a "
    "speech or documents. Usually roughly proportional to bogosity. See also buzzword-compliant, byte, "
    "nybble.\n\n"
    "   :byte: /bi:t/, n.\n\n   A unit of memory or data equal to the amount used to represent one "
    "character; on modern architectures this is invariably 8 bits. Some older architectures used byte for "
    "quantities "
    "of 6, 7, or 9 bits, and the PDP-10 supported bytes that were actually bitfields of 1 to 36 bits.",
    ":mouse ahead: vi.\n\n   Point-and-click analog of type ahead. To manipulate a computer's pointing "
    "device (almost always a mouse in this usage, but not necessarily) and its selection or command buttons "
    "before "
    "a computer program is ready to accept such input.\n\n"
    "   :mouso: /mow'soh/, n.\n\n   [by analogy with typo] An error in mouse usage resulting in an "
    "inappropriate selection or graphic garbage on the screen.\n\n"
    "   :mung: /muhng/, vt.\n\n   To make changes to a file, esp. large-scale and irrevocable changes; a "
    "mouso can mung a drawing. See BWQ.",
    ":nybble: /nib'l/, n.\n\n   Four bits; one hex digit; a half-byte.",
]


@pytest.fixture(scope="module")
def glossary(tmp_path_factory, gemma_gguf, tokenizer, embedding_cache):  # noqa: ANN201
    root = tmp_path_factory.mktemp("glossary")
    dataset = root / "glossary.jsonl"
    dataset.write_text("".join(json.dumps({"text": text}) + "\n" for text in GLOSSARY), encoding="utf-8")
    build_index(datasets=[(1, "glossary", dataset)], out_dir=root / "build", gguf_path=gemma_gguf,
                tokenizer=tokenizer, config=Config(), cache_dir=Path(embedding_cache))
    corpus = load_corpus(root / "build")
    texts = corpus.store.get_memories(list(range(corpus.count)))
    words = WordIndex.build(texts[row].text for row in range(corpus.count))
    return Retriever(tokenizer, Config()), SearchTarget(corpus, corpus.store, "glossary",
                                                        channels={WORDS: words})


@pytest.mark.parametrize(("question", "entry"), [
    ("What does BWQ stand for?", ":BWQ:"),
    ("What is a mouso?", ":mouso:"),
])
def test_a_term_question_is_answered_from_its_entry_not_the_index_that_lists_it(glossary, question, entry):
    retriever, target = glossary
    ranked = [int(row) for row in retriever.rank_rows(question, target)]
    texts = {row: memory.text for row, memory in target.store.get_memories(ranked).items()}
    assert entry in texts[ranked[0]], [texts[row][:30] for row in ranked]
    assert any(texts[row].startswith("Glossary index") for row in ranked)  # the index was a candidate
    results = retriever.search(question, [target])
    assert results and entry in results[0].memory.text


def test_a_question_of_eight_words_or_more_quotes_the_texts_holding_it_word_for_word():
    holds = quoted("  \u201cThe narwhal census on Baffin counted 1074 cartographers.\u201d ")
    assert holds is not None
    assert holds("Before.\nthe NARWHAL census on Baffin\n counted 1074  cartographers. After.")
    assert not holds("The narwhal census on Baffin counted 1075 cartographers.")
    assert not holds("The narwhal census on Baffin counted 1074")
    assert quoted("What does the zip() function return?") is None  # six words: many texts hold them
    assert quoted("one two three four five six seven eight") is not None
