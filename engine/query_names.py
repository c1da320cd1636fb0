"""What a question asks about (a name it calls, a term it asks the meaning of), and the memories
that define exactly that.

A question that writes a name as a call ("What does the zip() function return?", "how do I use
os.path.join()?") asks about THAT name. HDC and the word channel both rank by what a memory shares
with the question, so `zipfile`'s many memories, full of "zip", can outrank the one memory that
documents `zip` itself. A memory *defines* a name when its head (its first line) is the name:
alone ("zip"), qualified ("builtins.zip" for "zip()"; "os.path.join" for "os.path.join()"), or
as a signature ("zip(*iterables, strict=False)", "zip - ..."). The retriever moves such memories,
among the candidates it ranks, ahead of the rest, keeping each group's order
(`engine.retrieval.Retriever`).

A question that asks what a term is ("What is a mouso?", "What does BWQ stand for?", "In
scientific computation, what is a hidden flag?", "What does 'examining the entrails' mean?") asks
for the memory that *heads* that term: one of its lines starts with it as a glossary entry, a
definition-list term or a heading does (":mouso: n.", "BWQ: ...", "hidden flag - ...", "AT_RANDOM"
alone on its line with its description below, "Foo" over a line of "===="). A line of a table of
contents or an index (the term alone, the next line another short entry) does not: in a book with
one, that list holds every term, matches every such question, and defines none (the Jargon File's
"BWQ", "mouso" and "IYFEG" questions were primed with their index page, not their entry). A
question with neither is ranked as before (`definer`).

A question that is a passage of a memory, word for word (a sentence pasted from a document to find
it), asks for THAT memory (`quoted`): the retriever moves the memories holding it ahead of the rest,
and of the definers. The channels rank by rank, and a memory that holds the sentence among text on
other things can rank low by meaning: fused by rank, HDC's and the words' clear first then fell to
14th. A short question quotes nothing (`QUOTE_WORDS`): a few words are found in many texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A name written as a call: "zip()", "os.path.join()", "mincore( )"; arguments inside are allowed
# ("open(path)"), a bare word is not a call.
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)\([^()\n]{0,40}\)")
# The first word of a memory's head: a (qualified) name, then whatever follows it.
_HEAD_NAME = re.compile(r"\s*([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)")
HEAD_CHARS = 200
# "What is a X?", "Who were the X?", "What does X mean / stand for / denote / refer to?", after an
# optional leading clause ("In hacker jargon, ..."); X then loses a trailing "in/for/on ..." phrase.
_ASKED = re.compile(
    r"^(?:[^,?]{0,60},\s*)?(?:(?:what|who)\s+(?:is|are|was|were)\s+(?:an?\s+|the\s+)?(?P<is>[^?]+)"
    r"|what\s+does\s+(?:the\s+(?:word|term|phrase|expletive|acronym|abbreviation)\s+)?(?:an?\s+|the\s+)?"
    r"(?P<does>[^?]+?)\s+"
    r"(?:mean|stand\s+for|denote|convey|refer\s+to)\b)", re.I)
# A quoted phrase; an apostrophe inside a word ("hacker's") opens or closes none.
_QUOTED = re.compile(r"(?<!\w)[\'\u2018\"\u201c]([^\'\u2019\"\u201d?]{2,60})[\'\u2019\"\u201d](?!\w)")
_TRAILING_PHRASE = re.compile(r"\s+(?:in|for|on)\s+.*$", re.I)
# Words that stand for a term without being one ("What does it mean to ...?").
_NOT_TERMS = frozenset(["it", "this", "that", "these", "those", "they", "them", "he", "she", "you", "we", "i",
                        "there", "here", "one"])
ASKED_TERM_WORDS = 4
# A heading's own line ends with the term (markup aside); the next non-empty line is its text when
# it has at least this many words, or an underline ("====", "----").
TEXT_LINE_WORDS = 5
_UNDERLINE = re.compile(r"^\s*([=\-~^*#])\1{2,}\s*$")


def called_names(query: str) -> tuple[str, ...]:
    """The names `query` writes as calls, lowercased, in order, each once."""
    return tuple(dict.fromkeys(match.lower() for match in _CALLED.findall(query)))


def defines(text: str, names: tuple[str, ...]) -> bool:
    """Whether `text`'s head (its first line, at most `HEAD_CHARS`) starts with one of `names`,
    alone or as the last part of a qualified name ("builtins.zip" defines "zip")."""
    if not names:
        return False
    head = text[:HEAD_CHARS].split("\n", 1)[0]
    match = _HEAD_NAME.match(head)
    if match is None:
        return False
    first = match.group(1).lower()
    rest = head[match.end():]
    # A heading names it ("zip", "zip(*iterables)", "zip - ...", "zip: ..."); a sentence that
    # starts with the word ("Zip files are ...") does not.
    if rest.strip() and not rest.lstrip().startswith(("(", "-", ":")):
        return False
    return any(first == name or first.endswith("." + name) for name in names)


def asked_term(query: str) -> str | None:
    """The term `query` asks the meaning of (see the module docstring), lowercased: a quoted phrase
    of it, else the X of its "what is X" / "what does X mean" form; None for another question, a
    pronoun, a phrase with "of" or of more than `ASKED_TERM_WORDS` words."""
    quoted = _QUOTED.search(query)
    if quoted:
        term = quoted.group(1)
    else:
        match = _ASKED.match(query.strip())
        if match is None:
            return None
        term = _TRAILING_PHRASE.sub("", match.group("is") or match.group("does"))
    term = " ".join(term.split()).strip(" .!").lower()
    words = term.split()
    # "What is the default value of X?" asks for a property of X, not what a term means.
    if (
        not words
        or len(words) > ASKED_TERM_WORDS
        or "of" in words
        or all(word in _NOT_TERMS for word in words)
    ):
        return None
    return term


def heads(text: str, term: str) -> bool:
    """Whether a line of `text` starts with `term` (case aside, after markup such as ":", "*", "#",
    backquotes) as its entry: followed on that line by ":", "(", ",", " - ", " -- ", " / ", or
    alone there with its text (a line of `TEXT_LINE_WORDS`+ words) or an underline next."""
    if term.lower() not in text.lower():
        return False
    pattern = re.compile(r"^[\s:*#=`]*" + re.escape(term) + r"[`*]*(?P<after>.*)$", re.I)
    lines = text.split("\n")
    for number, line in enumerate(lines):
        match = pattern.match(line)
        if match is None:
            continue
        after = match.group("after")
        if after.startswith((":", "(", ",", " - ", " -- ", " / ", " \u2014 ")):
            return True
        if not after.strip():
            following = next((other for other in lines[number + 1:] if other.strip()), "")
            if len(following.split()) >= TEXT_LINE_WORDS or _UNDERLINE.match(following):
                return True
    return False


def definer(query: str) -> Callable[[str], bool] | None:
    """text -> whether it defines what `query` asks about: the names it calls (`defines`), else the
    term it asks the meaning of (`heads`); None when it asks about neither."""
    names = called_names(query)
    if names:
        return lambda text: defines(text, names)
    term = asked_term(query)
    if term is not None:
        return lambda text: heads(text, term)
    return None


# A question of this many words or more that a memory holds word for word quotes that memory.
QUOTE_WORDS = 8
_QUOTES = "\"'\u201c\u201d\u2018\u2019"


def quoted(query: str) -> Callable[[str], bool] | None:
    """text -> whether it holds `query` word for word (case, spacing and the quotes around it aside);
    None for a query of fewer than `QUOTE_WORDS` words. One pattern, searched in each text as it is:
    no normalized copy of every candidate's text."""
    words = query.strip().strip(_QUOTES).split()
    if len(words) < QUOTE_WORDS:
        return None
    passage = re.compile(r"\s+".join(map(re.escape, words)), re.IGNORECASE)
    return lambda text: passage.search(text) is not None
