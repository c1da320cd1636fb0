"""E-mail: EML (one RFC 5322 message), MBOX (a mailbox of them, read one message at a time) and MSG
(Outlook's OLE container, read with extract-msg and turned into the same MIME message).

Each message gives its body as a part: the text/plain body, or the readable text of its HTML body
(`engine.markup.html_text`), never headers or encoded data. Its place names the message (``message``:
the subject, or without one its 1-based number in the file) and carries ``mail_from``, ``mail_to``
(To and Cc), ``mail_date`` (ISO 8601 when it parses) and ``subject``, which the dataset iteration
copies into every memory's metadata. Each attachment is read as a document of its own through
`engine.readers.reader_for` (a PDF attachment by the PDF reader), its parts' places adding
``attachment``: the file name. A text attachment no reader claims is read as text; any other type,
an attachment a reader refuses, an undecodable part and a damaged message (a mailbox cut short) are
skipped with a reason (`engine.readers.skipped`) while the rest is read.
"""

from __future__ import annotations

import dataclasses
import mailbox
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any

from engine.markup import html_text
from engine.readers import DocumentError, Part, Reader, ReadOptions, reader_for, skipped

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Header fields that make a block of "Name: value" lines a mail's header rather than any text's.
_MAIL_FIELDS = frozenset({"from", "to", "cc", "subject", "date", "message-id", "received", "return-path",
                          "delivered-to", "reply-to", "sender", "in-reply-to", "references"})
_MIME_FIELDS = frozenset({"mime-version", "content-type", "content-transfer-encoding"})
_FIELD = re.compile(rb"[!-9;-~]+:")
# An mbox separator: "From sender@host Fri May  4 14:05:44 2001" (a sender, then a date with a time).
_FROM_LINE = re.compile(rb"From \S+ .*\b\d{1,2}:\d{2}")
_UNCLAIMED = ("", ".txt")  # names under which the content alone says it is mail
_SUFFIX = re.compile(r"\.[a-z0-9]{1,12}")
_MAX_DEPTH = 4  # forwarded messages inside forwarded messages


# ----------------------------------------------------------------------------- sniffing

def _header_names(lines: list[bytes]) -> list[str] | None:
    """The field names of the header block `lines` start with, None when they are not one."""
    names: list[str] = []
    for line in lines:
        line = line.rstrip(b"\r")
        if not line:
            break
        if line[:1] in (b" ", b"\t") and names:
            continue  # a folded field goes on
        match = _FIELD.match(line)
        if not match:
            return None
        names.append(match.group()[:-1].decode("ascii").lower())
    return names


def _looks_like_mail(lines: list[bytes], suffix: str, claimed: str) -> bool:
    names = _header_names(lines)
    if not names:
        return False
    if suffix == claimed:
        return True
    # Under another format's name ("from:" and "to:" keys in a .yaml) a header block is not a mail.
    known = set(names)
    fields = known & (_MAIL_FIELDS | _MIME_FIELDS)
    return suffix in _UNCLAIMED and len(fields) >= 2 and bool(known & _MAIL_FIELDS)


def _refuse(suffix: str, head: bytes, kind: str) -> None:
    if head.strip():  # an empty file: the dataset sniffing says so in its own words
        raise DocumentError(f"a {suffix} file should hold {kind}, but this one starts with {head[:24]!r}")


def sniff_mbox(head: bytes, suffix: str) -> bool:
    """An mbox starts with a "From " separator line followed by a message's header."""
    lines = head.split(b"\n", 200)[:200]
    if _FROM_LINE.match(lines[0]) and suffix != ".eml" and _looks_like_mail(lines[1:], suffix, ".mbox"):
        return True
    if suffix == ".mbox":
        _refuse(suffix, head, "a mailbox (messages after \"From \" lines)")
    return False


def sniff_eml(head: bytes, suffix: str) -> bool:
    """A message starts with its header fields (an .eml may keep an mbox "From " line above them)."""
    lines = head.split(b"\n", 200)[:200]
    if suffix == ".eml" and lines and _FROM_LINE.match(lines[0]):
        lines = lines[1:]
    if _looks_like_mail(lines, suffix, ".eml"):
        return True
    if suffix == ".eml":
        _refuse(suffix, head, "an e-mail message (header fields, then its body)")
    return False


def sniff_msg(head: bytes, suffix: str) -> bool:
    """An Outlook message is an OLE compound file named .msg (the same container holds .doc and .xls)."""
    if suffix != ".msg":
        return False
    if head.startswith(OLE_MAGIC):
        return True
    _refuse(suffix, head, "an Outlook message (an OLE compound file)")
    return False


# ----------------------------------------------------------------------------- one message

def _header(message: EmailMessage, name: str) -> str:
    try:
        return " ".join(str(message.get(name) or "").split())
    except (ValueError, TypeError, IndexError, AttributeError):  # a header its parser trips over
        return ""


def _date(message: EmailMessage) -> str:
    raw = _header(message, "date")
    try:
        return parsedate_to_datetime(raw).isoformat() if raw else ""
    except (TypeError, ValueError):
        return raw


def message_place(message: EmailMessage, number: int) -> dict[str, Any]:
    """The place and metadata of a message: ``message`` (subject, else its number), ``mail_from``,
    ``mail_to``, ``mail_date``, ``subject``."""
    subject = _header(message, "subject")
    recipients = ", ".join(value for value in (_header(message, "to"), _header(message, "cc")) if value)
    return {"message": subject or number, "mail_from": _header(message, "from"), "mail_to": recipients,
            "mail_date": _date(message), "subject": subject}


def _defects(message: EmailMessage) -> list[str]:
    """What the parser found broken in a message, in words (a mailbox cut short shows here)."""
    words = set()
    for part in message.walk():
        for defect in part.defects:
            name = type(defect).__name__.removesuffix("Defect")
            if name in ("CloseBoundaryNotFound", "StartBoundaryNotFound", "MultipartInvariantViolation"):
                words.add("cut short or damaged (a MIME boundary is missing)")
            elif name.startswith("InvalidBase64"):
                words.add("damaged (its base64 data is broken; the file may be cut short)")
            else:
                words.add(f"damaged ({re.sub(r'(?<!^)(?=[A-Z])', ' ', name).lower()})")
    return sorted(words)


def _text(part: EmailMessage) -> str:
    """The readable text of a text part (an HTML part's text without its markup); raises
    LookupError or UnicodeError when its charset is unknown."""
    content = part.get_content()
    if not isinstance(content, str):
        content = content.decode(part.get_content_charset() or "utf-8", errors="replace")
    if part.get_content_subtype() == "html":
        return "".join(html_text([content]))
    return content


def _pieces(node: EmailMessage, body: EmailMessage | None) -> Iterator[tuple[str, EmailMessage]]:
    """("text", part) for a message's inline text parts besides its body, ("file", part) for its
    attachments and forwarded messages, in order. The alternatives of a body are its other forms."""
    for part in node.iter_parts():
        if part is body:
            continue
        if part.get_content_type() == "message/rfc822" or part.get_filename() or part.is_attachment():
            yield "file", part
        elif part.is_multipart():
            if not (part.get_content_subtype() == "alternative" and body is not None and _holds(part, body)):
                yield from _pieces(part, body)
        elif part.get_content_maintype() == "text" and node.get_content_subtype() != "alternative":
            yield "text", part
        elif part.get_content_maintype() not in ("text", "multipart"):
            yield "file", part


def _holds(node: EmailMessage, part: EmailMessage) -> bool:
    return any(child is part for child in node.walk())


def _body_part(body: EmailMessage | None, place: dict[str, Any], options: ReadOptions) -> Part | None:
    if body is None:
        return None
    try:
        text = _text(body)
    except (LookupError, UnicodeError):
        skipped(options, place, f"the body's charset {body.get_content_charset()!r} is unknown; not read")
        return None
    return Part(text, place) if text.strip() else None


def message_parts(message: EmailMessage, place: dict[str, Any], options: ReadOptions,
                  depth: int = 0) -> Iterator[Part]:
    """The parts of one parsed message: its body, its other inline text, then its attachments (each
    a document of its own), all with `place` (`message_place`, and ``attachment`` inside one)."""
    for problem in _defects(message) if depth == 0 else ():  # the first walk sees forwarded ones too
        skipped(options, place, f"the message is {problem}; what could be read was read")
    if message.get_content_type() == "message/rfc822":  # a message that only forwards another
        yield from _attachment_parts(message, place, options, depth)
        return
    body = message.get_body(preferencelist=("plain", "html"))
    part = _body_part(body, place, options)
    if part is not None:
        yield part
    if not message.is_multipart():
        return
    for kind, piece in _pieces(message, body):
        if kind == "text":
            try:
                text = _text(piece)
            except (LookupError, UnicodeError):
                skipped(options, place, f"a text part's charset {piece.get_content_charset()!r} is unknown")
                continue
            if text.strip():
                yield Part(text, place)
        else:
            yield from _attachment_parts(piece, place, options, depth)


def _attachment_name(part: EmailMessage) -> str:
    name = (part.get_filename() or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    return name or f"unnamed {part.get_content_type()} attachment"


def _attachment_parts(part: EmailMessage, place: dict[str, Any], options: ReadOptions,
                      depth: int) -> Iterator[Part]:
    name = _attachment_name(part)
    inner_place = {**place, "attachment": name}
    if part.get_content_type() == "message/rfc822":
        if depth >= _MAX_DEPTH:
            skipped(options, inner_place, f"a message forwarded more than {_MAX_DEPTH} levels deep")
            return
        for inner in part.iter_parts():
            subject = _header(inner, "subject")
            if not part.get_filename() and subject:
                inner_place = {**place, "attachment": f"forwarded message “{subject}”"}
            yield from message_parts(inner, inner_place, options, depth + 1)
        return
    data = part.get_payload(decode=True) or b""
    if not data.strip():
        skipped(options, inner_place, "the attachment is empty")
        return
    yield from _file_parts(data, name, part, inner_place, options)


def _file_parts(data: bytes, name: str, part: EmailMessage, place: dict[str, Any],
                options: ReadOptions) -> Iterator[Part]:
    """An attachment's bytes read by the reader of their format, or as text when none claims text."""
    match = _SUFFIX.fullmatch(Path(name).suffix.lower())
    suffix = match.group() if match else ""
    try:
        read = _read_function(data[:64 * 1024], suffix)
    except ValueError as error:  # a reader's DocumentError: the name says one format, the bytes another
        skipped(options, place, str(error))
        return
    if read is None:
        if part.get_content_maintype() != "text":
            skipped(options, place, f"no reader for this type of attachment ({part.get_content_type()}, "
                                    f"{suffix or 'no file name ending'}); not read")
            return
        try:
            text = _text(part)
        except (LookupError, UnicodeError):
            skipped(options, place, f"the attachment's charset {part.get_content_charset()!r} is unknown")
            return
        if text.strip():
            yield Part(text, place)
        return
    with tempfile.TemporaryDirectory(prefix="hdrag-attachment-") as folder:
        path = Path(folder) / f"attachment{suffix}"
        path.write_bytes(data)
        try:
            for inner in read(path, options):
                yield dataclasses.replace(inner, place={**inner.place, **place})  # OCR pending kept
        except ValueError as error:  # engine.readers' DocumentError
            skipped(options, place, str(error))


def _read_function(head: bytes, suffix: str) -> Callable[[Path, ReadOptions], Iterator[Part]] | None:
    reader = reader_for(head, suffix)
    return reader.read if reader is not None else None


def _parse(data: bytes) -> EmailMessage:
    message = BytesParser(policy=policy.default).parsebytes(data)
    assert isinstance(message, EmailMessage)  # policy.default's message factory
    return message


# What the stdlib's header parser has been seen to raise on mangled mail (beyond its defects).
_PARSER_FAILURES = (TypeError, IndexError, AttributeError, LookupError, UnicodeError, ValueError)


def read_message(data: bytes, number: int, options: ReadOptions, share: float) -> Iterator[Part]:
    """The parts of one message given as bytes (`number`: its 1-based place in its file); a message
    the parser gives up on is skipped from there with the reason, the rest of its file read on."""
    place: dict[str, Any] = {"message": number}
    try:
        message = _parse(data)
        place = message_place(message, number)
        for part in message_parts(message, place, options):
            yield dataclasses.replace(part, share=share)
    except DocumentError:
        raise
    except _PARSER_FAILURES as error:
        skipped(options, place, f"the message could not be read past this point ({type(error).__name__}: "
                                f"{error})")


# ----------------------------------------------------------------------------- the formats

def read_eml(path: Path, options: ReadOptions) -> Iterator[Part]:
    """One message file."""
    yield from read_message(path.read_bytes(), 1, options, 1.0)


def read_mbox(path: Path, options: ReadOptions) -> Iterator[Part]:
    """A mailbox, one message in memory at a time (the first pass only notes where each begins)."""
    started = time.monotonic()
    box = mailbox.mbox(path, create=False)
    try:
        keys = box.keys()
        if not keys:
            raise DocumentError("the mailbox holds no messages")
        for number, key in enumerate(keys, start=1):
            if time.monotonic() - started > options.max_seconds:
                raise DocumentError(f"reading stopped at message {number} of {len(keys)}: over the "
                                    f"{options.max_seconds:g} s one document may take")
            yield from read_message(box.get_bytes(key), number, options, number / len(keys))
    finally:
        box.close()


def _outlook_mime(outlook: Any, depth: int = 0) -> EmailMessage:
    """extract-msg's MIME form of an Outlook message, mended where it loses what the file holds: a
    message kept without its transport headers gets no Subject, From or Date (taken here from the
    message's own properties), and an attached Outlook message is put bare among the body's parts
    (wrapped here as a forwarded message, message/rfc822, under its attachment's name, and mended
    the same way)."""
    message = outlook.asEmailMessage()
    for name, key in (("Subject", "subject"), ("From", "sender"), ("Date", "date")):
        value = getattr(outlook, key, None)
        if value and not _header(message, name):
            del message[name]
            message[name] = format_datetime(value) if name == "Date" else " ".join(str(value).split())
    embedded = iter([attachment for attachment in getattr(outlook, "attachments", ())
                     if attachment.dataType and hasattr(attachment.dataType, "asEmailMessage")])
    related = next(message.iter_parts(), None)
    if related is None or not related.is_multipart():  # a message of one part has nothing attached
        return message
    parts = related.get_payload()
    for index, part in enumerate(parts):
        # extract-msg's own attachments are leaves; a multipart beside the body is an attached message.
        attachment = next(embedded, None) if index and part.is_multipart() else None
        if attachment is None:
            continue
        wrapper = EmailMessage()
        inner = _outlook_mime(attachment.data, depth + 1) if depth < _MAX_DEPTH else part
        name = attachment.longFilename or attachment.name or "attached message"
        wrapper.set_content(inner, disposition="attachment", filename=name)
        parts[index] = wrapper
    return message


def read_msg(path: Path, options: ReadOptions) -> Iterator[Part]:
    """An Outlook message: extract-msg reads the OLE container and gives it as a MIME message."""
    import extract_msg
    from extract_msg.exceptions import ExMsgBaseException

    try:
        outlook = extract_msg.openMsg(str(path))
    except (ExMsgBaseException, OSError, ValueError) as error:  # olefile's errors are OSErrors
        raise DocumentError(f"not a readable Outlook message (damaged, or another kind of Office "
                            f"file named .msg): {error}") from None
    try:
        if not hasattr(outlook, "asEmailMessage"):
            raise DocumentError(f"an Outlook {type(outlook).__name__} item, not a mail message; not read")
        try:
            data = _outlook_mime(outlook).as_bytes()
        except ExMsgBaseException as error:
            raise DocumentError(f"this Outlook message cannot be converted: {error}") from None
    finally:
        outlook.close()
    yield from read_message(data, 1, options, 1.0)


READERS = (
    Reader("eml", (".eml",), sniff_eml, read_eml, "E-mail message (EML)"),
    Reader("mbox", (".mbox",), sniff_mbox, read_mbox, "Mailbox (MBOX)"),
    Reader("msg", (".msg",), sniff_msg, read_msg, "Outlook message (MSG)"),
)
