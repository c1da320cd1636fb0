"""One real file of every format the portal reads, each written by its format's own library (fpdf2,
python-docx, openpyxl, odfpy, python-pptx, ebooklib, Pillow, pyarrow, the standard library's email and
mailbox), each carrying a made-up fact no other file holds; MSG, which no library here writes, is a real
Outlook message (tests/fixtures/mail/, from msg-parser's test files)."""

from __future__ import annotations

import json
import mailbox
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

from tests.documents import docx_bytes, pdf_bytes
from tests.office_files import epub_file, odp_file, ods_file, odt_file, pptx_file, xlsx_file

REAL_MSG = Path(__file__).resolve().parent / "fixtures" / "mail" / "failure_notice.msg"


@dataclass(frozen=True)
class Sample:
    """A file of one format: its name, the `format` its memories carry, and the made-up fact it holds
    (`words`: what a search asks, `holds`: what its memory's text must contain)."""

    name: str
    format: str
    words: str
    holds: str


SAMPLES = (
    Sample("report.pdf", "pdf", "Zorblatt codename KESTREL", "KESTREL-7"),
    Sample("scanned.pdf", "pdf", "heron pond drained", "heron"),
    Sample("memo.docx", "docx", "Quillfern vault combination", "Quillfern"),
    Sample("stock.xlsx", "xlsx", "Brannigan warehouse gizmotrons", "gizmotrons"),
    Sample("macros.xlsm", "xlsx", "Quimbleford sluice gate", "Quimbleford"),
    Sample("budget.ods", "ods", "Vexmoor lighthouse paint", "Vexmoor"),
    Sample("visits.csv", "csv", "Plumbottom clinic visitors", "Plumbottom"),
    Sample("routes.tsv", "csv", "Dravencourt ferry route", "Dravencourt"),
    Sample("review.pptx", "pptx", "Snorkelwick launch window", "Snorkelwick"),
    Sample("talk.odp", "odp", "Grintleby choir rehearsal", "Grintleby"),
    Sample("minutes.odt", "odt", "Hobbleshank bridge toll", "Hobbleshank"),
    Sample("field-notes.epub", "epub", "Wimbleton marsh herons", "Wimbleton"),
    # OCR: a small drawn line in each image format and in a PDF without text (plain words, as OCR
    # returns them).
    Sample("whiteboard.png", "png", "pelican harbour quota", "pelican"),
    Sample("scan.jpg", "jpeg", "walrus ferry leaves", "walrus"),
    Sample("fax.tiff", "tiff", "badger tunnel survey", "badger"),
    Sample("photo.webp", "webp", "otter meadow fence", "otter"),
    Sample("plan.eml", "eml", "Fennimore orchard cider", "Fennimore"),
    Sample("archive.mbox", "mbox", "Tuppleworth quarry blasting", "Tuppleworth"),
    Sample("failure_notice.msg", "msg", "Delivery Status Notification recipient", "Delivery Status"),
    Sample("gauges.py", "code", "Crumblethorpe pressure gauge", "Crumblethorpe"),
    Sample("guide.md", "markdown", "Marrowdale kiln firing", "Marrowdale"),
    Sample("page.html", "html", "Oddlington tram depot", "Oddlington"),
    Sample("catalog.xml", "xml", "Pennywhistle seed catalogue", "Pennywhistle"),
    Sample("readme.txt", "text", "Sprocketby bell tower", "Sprocketby"),
    Sample("facts.json", "json", "Thistledown beacon lamp", "Thistledown"),
    Sample("facts.jsonl", "jsonl", "Umberleigh canal lock", "Umberleigh"),
    Sample("facts.parquet", "parquet", "Wobbleford cheese cellar", "Wobbleford"),
)
# Each image its own line (a memory of the same text in two files would be one memory).
IMAGES = {"whiteboard.png": ("The pelican harbour quota is nine crates.", "PNG"),
          "scan.jpg": ("The walrus ferry leaves at seven sharp.", "JPEG"),
          "fax.tiff": ("The badger tunnel survey ends in June.", "TIFF"),
          "photo.webp": ("The otter meadow fence needs new posts.", "WEBP")}


def _message(subject: str, body: str) -> EmailMessage:
    message = EmailMessage()
    message["From"], message["To"] = "Ana <ana@example.org>", "Bo <bo@example.org>"
    message["Subject"], message["Date"] = subject, "Tue, 03 Mar 2026 09:30:00 +0100"
    message.set_content(body)
    return message


def _image(line: str, image_format: str):  # noqa: ANN202 - a writer
    """A small scan of one drawn line (bench.data.scans renders it with Pillow), saved as `image_format`."""

    def write(path: Path) -> None:
        from bench.data.scans import render_page

        page = render_page(line, 200, size_inches=(5.0, 0.8), columns=60, margin_inches=0.2)[0]
        page.convert("RGB").save(path, image_format, resolution=200.0)

    return write


def _mbox(path: Path, *messages: EmailMessage) -> None:
    box = mailbox.mbox(path)
    for message in messages:
        box.add(message.as_bytes())
    box.close()


def _parquet(path: Path, texts: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), path)


def _text(text: str):  # noqa: ANN202 - a writer
    return lambda path: path.write_text(text)


WRITERS = {
    "report.pdf": lambda path: path.write_bytes(
        pdf_bytes([["Quarterly report."], ["The Zorblatt codename is KESTREL-7."]])),
    "memo.docx": lambda path: path.write_bytes(
        docx_bytes(["Memo to the night shift.", "The Quillfern vault combination changes every Tuesday."])),
    "stock.xlsx": lambda path: xlsx_file(
        path, {"Stock": [["Warehouse", "Part", "Count"], ["Brannigan", "gizmotrons", 41]]}),
    "macros.xlsm": lambda path: xlsx_file(
        path, {"Gates": [["Gate", "Opens"], ["Quimbleford sluice", "6:00"]]}),
    "budget.ods": lambda path: ods_file(
        path, {"Budget": [["Item", "Cost"], ["Vexmoor lighthouse paint", 380]]}),
    "visits.csv": _text("Clinic,Visitors\nPlumbottom clinic,212\n"),
    "routes.tsv": _text("Route\tDays\nDravencourt ferry route\tMondays\n"),
    "review.pptx": lambda path: pptx_file(
        path, [{"title": "Launch", "body": ["The Snorkelwick launch window opens in May"]}]),
    "talk.odp": lambda path: odp_file(
        path, [{"title": "Choir", "body": ["Grintleby choir rehearsal moves to Thursdays"]}]),
    "minutes.odt": lambda path: odt_file(
        path, [(1, "Minutes"), (None, "The Hobbleshank bridge toll rises to four pence.")]),
    "field-notes.epub": lambda path: epub_file(
        path, [("Marsh", "<p>The Wimbleton marsh herons nest in April.</p>")]),
    **{name: _image(line, kind) for name, (line, kind) in IMAGES.items()},
    "scanned.pdf": _image("The heron pond was drained in March.", "PDF"),  # a page without a text layer
    "plan.eml": lambda path: path.write_bytes(
        _message("Cider", "The Fennimore orchard cider is ready in October.\n").as_bytes()),
    "archive.mbox": lambda path: _mbox(
        path, _message("Quarry", "Tuppleworth quarry blasting starts at noon on Fridays.\n")),
    "failure_notice.msg": lambda path: path.write_bytes(REAL_MSG.read_bytes()),
    "gauges.py": _text('def crumblethorpe_limit():\n    """The Crumblethorpe pressure gauge limit."""\n'
                       "    return 7.5\n"),
    "guide.md": _text("# Kilns\n\nMarrowdale kiln firing takes eleven hours.\n"),
    "page.html": _text("<html><body><h1>Trams</h1>"
                       "<p>The Oddlington tram depot closes at nine.</p></body></html>"),
    "catalog.xml": _text("<catalog><seed>The Pennywhistle seed catalogue lists forty beans.</seed>"
                         "</catalog>"),
    "readme.txt": _text("The Sprocketby bell tower rings twelve times at noon.\n"),
    "facts.json": _text(json.dumps([{"text": "The Thistledown beacon lamp burns whale oil."}])),
    "facts.jsonl": _text(json.dumps({"text": "The Umberleigh canal lock opens at dawn."}) + "\n"),
    "facts.parquet": lambda path: _parquet(path, ["The Wobbleford cheese cellar keeps forty wheels."]),
}


def every_format(folder: Path) -> dict[str, Path]:
    """Write every sample into `folder`; returns {name: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    for sample in SAMPLES:
        WRITERS[sample.name](folder / sample.name)
    return {sample.name: folder / sample.name for sample in SAMPLES}
