"""What the ZIP-based office formats share: sniffing by suffix or by the ODF/EPUB ``mimetype`` member,
the archive caps checked before a library opens the file, and the reasons a person can act on.

DOCX, XLSX, PPTX, ODT, ODS, ODP and EPUB are ZIP packages. A ``.zip`` is never one of them (the upload
unpacks a ZIP into its members), so an OOXML package is known by its name; an OpenDocument file or an
EPUB also by its first member, ``mimetype``, stored uncompressed at the start (both standards require
it). A password-protected OOXML file is not a ZIP at all but an OLE compound file holding an
``EncryptedPackage`` stream; an encrypted OpenDocument file is a ZIP whose manifest lists
``encryption-data``. Both are refused as password-protected, before any library tries to parse them.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.readers import DocumentError, ReadOptions

ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_MIMETYPE_AT = 30  # a ZIP's first local header is 30 bytes, then the member's name


def article(label: str) -> str:
    """ "an" before "Excel", "OpenDocument", "EPUB"; "a" before "PowerPoint", "Word"."""
    return "an" if label[:1].upper() in "AEIOU" else "a"


def package_sniffer(suffixes: tuple[str, ...], label: str,
                    mimetype: bytes = b"") -> Callable[[bytes, str], bool]:
    """A `Reader.sniff` for a ZIP package: its ``mimetype`` member (ODF, EPUB) wins; otherwise a claimed
    suffix with a ZIP (or an OLE file: maybe encrypted, `package` says) is this format, and a claimed
    suffix with any other content is not a `label` file."""

    def sniff(head: bytes, suffix: str) -> bool:
        declared = head[_MIMETYPE_AT:_MIMETYPE_AT + 8 + len(mimetype)]
        if mimetype and head.startswith(ZIP_MAGIC) and declared == b"mimetype" + mimetype:
            return True
        if suffix not in suffixes:
            return False
        if head.startswith((ZIP_MAGIC, OLE_MAGIC)):
            return True
        raise DocumentError(f"not {article(label)} {label} file (content starts with {head[:8]!r})")

    return sniff


def _ole_reason(path: Path, label: str) -> str:
    import olefile

    try:
        with olefile.OleFileIO(str(path)) as ole:
            encrypted = ole.exists("EncryptedPackage") or ole.exists("EncryptionInfo")
    except OSError:
        encrypted = False
    if encrypted:
        return (f"the {label} file is password-protected (encrypted): open it, remove the password and "
                f"upload the unprotected copy")
    return (f"an older binary Office file (or another OLE file) under a {label} name: open it and save it "
            f"as {label}")


def _check_caps(archive: zipfile.ZipFile, options: ReadOptions, label: str) -> None:
    members = archive.infolist()
    if len(members) > options.max_members:
        raise DocumentError(f"the {label} file holds {len(members):,} parts, more than the limit of "
                            f"{options.max_members:,}")
    # zipfile never reads a member past its declared size, so the declared sizes bound what any
    # library can unpack from this file.
    expanded = sum(member.file_size for member in members)
    if expanded > options.max_expanded_bytes:
        raise DocumentError(f"the {label} file expands to {expanded:,} bytes, more than the limit of "
                            f"{options.max_expanded_bytes:,} (an archive bomb, or too large to read)")


def _encrypted_odf(archive: zipfile.ZipFile) -> bool:
    try:
        manifest = archive.read("META-INF/manifest.xml")
    except KeyError:
        return False
    return b"encryption-data" in manifest


@contextmanager
def package(path: Path, options: ReadOptions, label: str, required: str) -> Iterator[zipfile.ZipFile]:
    """The open ZIP package at `path`, once it passed the archive caps and holds `required` (the member
    that makes it a `label` file); DocumentError saying why not (password-protected, damaged, not this
    kind of file, over a cap)."""
    with open(path, "rb") as handle:
        head = handle.read(len(OLE_MAGIC))
    if head.startswith(OLE_MAGIC):
        raise DocumentError(_ole_reason(path, label))
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise DocumentError(f"damaged {label} file: its ZIP directory is missing or broken (was the file "
                            f"cut short?); save it again and upload the new copy") from None
    with archive:
        _check_caps(archive, options, label)
        if _encrypted_odf(archive):
            raise DocumentError(f"the {label} file is password-protected (encrypted): open it, remove the "
                                f"password and upload the unprotected copy")
        if required not in archive.NameToInfo:
            raise DocumentError(f"not {article(label)} {label} file: the package has no {required}")
        yield archive


def check_package(path: Path, options: ReadOptions, label: str, required: str) -> None:
    """`package`'s checks, for a reader whose library opens the file itself."""
    with package(path, options, label, required):
        pass


def damaged(label: str, error: BaseException) -> DocumentError:
    """A library's failure on a package that passed `package` (a cut or corrupt member)."""
    detail = str(error).strip() or type(error).__name__
    return DocumentError(f"damaged {label} file ({detail[:200]}); save it again and upload the new copy")
