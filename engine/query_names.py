"""Names a question calls, and the memories that define exactly them.

A question that writes a name as a call ("What does the zip() function return?", "how do I use
os.path.join()?") asks about THAT name. HDC and the word channel both rank by what a memory shares
with the question, so `zipfile`'s many memories, full of "zip", can outrank the one memory that
documents `zip` itself. A memory *defines* a name when its head (its first line) is the name:
alone ("zip"), qualified ("builtins.zip" for "zip()"; "os.path.join" for "os.path.join()"), or
as a signature ("zip(*iterables, strict=False)", "zip - ..."). The retriever moves such memories,
among the candidates it ranks, ahead of the rest, keeping each group's order
(`engine.retrieval.Retriever`); a question without a called name is ranked as before.
"""

from __future__ import annotations

import re

# A name written as a call: "zip()", "os.path.join()", "mincore( )"; arguments inside are allowed
# ("open(path)"), a bare word is not a call.
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)\([^()\n]{0,40}\)")
# The first word of a memory's head: a (qualified) name, then whatever follows it.
_HEAD_NAME = re.compile(r"\s*([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)")
HEAD_CHARS = 200


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
