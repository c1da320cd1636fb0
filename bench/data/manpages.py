"""A known-item set from the Linux manual pages (Debian packages `manpages` and `manpages-dev`).

Document: one page's DESCRIPTION section as plain text (roff markup removed), cut at
`max_chars`. Query: the page's NAME line description ("fork \\- create a child process" gives
"create a child process"). Exactly one document is relevant. Pages that only redirect (`.so`),
pages without both sections and descriptions shared by several pages do not become queries;
every page with a description section can be a distractor.

`answer_corpus_pages` is the corpus of `bench.answers --set manpages`: a fixed list of whole pages,
rendered as `man` shows them.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

from bench.data.glossaries import KnownItemSet, pick_known_items

PACKAGES = ("manpages", "manpages-dev")
PACKAGE_HINT = "sudo apt-get install manpages manpages-dev"
MAN_DIR = Path("/usr/share/man")
_PAGE = re.compile(r"/usr/share/man/man\d/[^/]+\.\d\w*\.gz$")
_FONT_MACROS = {".B", ".I", ".R", ".BR", ".BI", ".IB", ".IR", ".RB", ".RI", ".SM", ".SB"}
_ESCAPES = (
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\\[(bu|em|en)\]"), " "), (re.compile(r"\\\[[a-z]{2}\]|\\\(..|\\\*\(..|\\\*."), ""),
    (re.compile(r"\\-"), "-"), (re.compile(r"\\e"), r"\\"), (re.compile(r"\\[&|^%:]"), ""),
    (re.compile(r"\\ "), " "), (re.compile(r"\\s[-+]?\d"), ""), (re.compile(r'\\"'), ""),
)
_ARGS = re.compile(r'"([^"]*)"|(\S+)')
_SPACES = re.compile(r"\s+")


class ManPagesMissing(FileNotFoundError):
    pass


def _plain(text: str) -> str:
    for pattern, replacement in _ESCAPES:
        text = pattern.sub(replacement, text)
    return text


def _line_text(line: str) -> str:
    """The words a roff line shows: font macros keep their arguments, other requests nothing."""
    if not line.startswith((".", "'")):
        return _plain(line)
    macro, _, rest = line.partition(" ")
    if macro in _FONT_MACROS:
        args = [quoted or bare for quoted, bare in _ARGS.findall(rest)]
        glue = " " if macro in (".B", ".I", ".R", ".SM", ".SB") else ""
        return _plain(glue.join(args))
    if macro in (".TP", ".IP") and rest and not rest.strip().isdigit():
        return _plain(rest.split(" ")[0].strip('"'))
    return ""


def read_page(path: Path) -> tuple[str, str] | None:
    """(NAME description, DESCRIPTION text) of one page, or None (a redirect, or a section missing)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith(".so "):
            return None
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith(".SH"):
            current = line[3:].strip().strip('"').upper()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(_line_text(line))
    name = _SPACES.sub(" ", " ".join(sections.get("NAME", []))).strip()
    body = _SPACES.sub(" ", " ".join(sections.get("DESCRIPTION", []))).strip()
    if " - " not in name or not body:
        return None
    return name.split(" - ", 1)[1].strip(), body


def manpage_entries(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, str]]:
    """(description, body) of every readable page the packages installed, in path order."""
    try:
        listing = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise ManPagesMissing(f"manual pages not installed ({PACKAGE_HINT}): {error}") from error
    paths = sorted({line for line in listing.splitlines() if _PAGE.match(line) and Path(line).is_file()})
    if not paths:
        raise ManPagesMissing(f"no manual pages found ({PACKAGE_HINT})")
    return [page for page in (read_page(Path(path)) for path in paths) if page is not None]


def known_item_set(entries: list[tuple[str, str]], n_documents: int, n_queries: int, *, seed: int = 0,
                   min_words: int = 3, max_chars: int = 2000) -> KnownItemSet:
    """`n_queries` NAME-line queries over `n_documents` page bodies (the queries' pages plus random
    distractors), bodies cut at `max_chars`."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for description, _ in entries:
        counts[description.lower()] = counts.get(description.lower(), 0) + 1
    usable = [
        i
        for i, (description, body) in enumerate(entries)
        if counts[description.lower()] == 1
        and len(description.split()) >= min_words
        and len(body.split()) >= 10
    ]
    chosen, picked, position = pick_known_items(rng, usable, list(range(len(entries))), n_queries=n_queries,
                                                n_documents=n_documents)
    return KnownItemSet(name="manpages", documents=[entries[i][1][:max_chars] for i in picked],
                        queries=[entries[i][0] for i in chosen], relevant=[position[i] for i in chosen])


# The pages of `bench.answers --set manpages`, from sections 1, 2, 3, 5 and 7 of the two packages:
# system calls, library functions, file formats and overview pages, the kind of page one looks up
# for a detail (no everyday shell command). A fixed list, not a draw, so that the corpus the
# questions were written from stays the same when a package release adds pages.
ANSWER_PAGES = (
    "man1/memusage.1", "man1/pldd.1", "man1/sprof.1",
    "man2/close_range.2", "man2/copy_file_range.2", "man2/eventfd.2", "man2/flock.2", "man2/getrandom.2",
    "man2/ioprio_set.2", "man2/kcmp.2", "man2/memfd_create.2", "man2/mincore.2", "man2/mlock.2",
    "man2/personality.2", "man2/pidfd_open.2", "man2/sync_file_range.2", "man2/timerfd_create.2",
    "man3/a64l.3", "man3/backtrace.3", "man3/fmemopen.3", "man3/getauxval.3", "man3/getentropy.3",
    "man3/getpass.3", "man3/hsearch.3", "man3/malloc_usable_size.3", "man3/mallopt.3", "man3/memfrob.3",
    "man3/mkstemp.3", "man3/pthread_mutexattr_setrobust.3", "man3/pthread_setname_np.3", "man3/strfry.3",
    "man3/strtol.3", "man3/strverscmp.3",
    "man5/acct.5", "man5/core.5", "man5/gai.conf.5", "man5/host.conf.5", "man5/resolv.conf.5",
    "man5/securetty.5", "man5/tmpfs.5", "man5/tzfile.5",
    "man7/epoll.7", "man7/landlock.7", "man7/math_error.7", "man7/mq_overview.7", "man7/nptl.7",
    "man7/pid_namespaces.7", "man7/pipe.7", "man7/pkeys.7", "man7/random.7", "man7/sem_overview.7",
    "man7/shm_overview.7", "man7/sigevent.7", "man7/signal-safety.7", "man7/time_namespaces.7",
    "man7/udp.7", "man7/vdso.7",
)
_PARAGRAPH_MACROS = {".PP", ".P", ".LP", ".TP", ".IP", ".sp", ".SH", ".SS"}


def _roff_page(path: Path) -> str:
    """A whole page as plain text without man-db: section headings and paragraphs kept, markup
    removed (`_line_text`), no filling or indentation."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.startswith((".\\\"", "'\\\"")):
            continue
        macro = line.partition(" ")[0]
        if macro in _PARAGRAPH_MACROS and paragraphs[-1]:
            paragraphs.append([])
        if macro in (".SH", ".SS"):
            paragraphs[-1].append(_plain(line[3:].strip().strip('"')))
            paragraphs.append([])
        elif text := _line_text(line).strip():
            paragraphs[-1].append(text)
    return "\n\n".join(" ".join(words) for words in paragraphs if words) + "\n"


def render_page(path: Path) -> str:
    """One page as a user saves it from `man` (80 columns, no hyphenation or justification, the
    overstrikes removed by `col -b`); where man-db is missing, `_roff_page`. A fixed locale and
    environment, so that the text is the same on every run."""
    if not (shutil.which("man") and shutil.which("col")):
        return _roff_page(path)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "MANWIDTH": "80"}
    page = subprocess.run(["man", "--nh", "--nj", "--encoding=utf-8", "-l", str(path)], env=env,
                          capture_output=True, check=True).stdout
    return subprocess.run(["col", "-b", "-x"], input=page, env=env, capture_output=True,
                          check=True).stdout.decode("utf-8")


def answer_corpus_pages(pages: tuple[str, ...] = ANSWER_PAGES) -> list[str]:
    """The plain text of each page of `pages` (paths under /usr/share/man, no `.gz`), in order."""
    paths = [MAN_DIR / f"{page}.gz" for page in pages]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise ManPagesMissing(f"manual pages not found ({PACKAGE_HINT}): {', '.join(missing)}")
    return [render_page(path) for path in paths]
