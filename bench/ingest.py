"""Ingest of a mixed folder: the share of files read (or refused with a reason), pages or records a
second per format, the peak RSS, and OCR's character error rate against the text scans were made from.

The folder is assembled from real things: pages of the Python documentation's prose rendered with
DejaVu Serif at 150 and 300 dpi, skewed and with scanner noise (bench.data.scans), saved by Pillow
as PNG and WebP (150 dpi), JPEG, TIFF (one frame a page) and an image-only PDF (300 dpi); the
public PDFs Debian ships in /usr/share/doc (where present); a DOCX written by python-docx,
Markdown, plain text and JSONL of the same prose; and bad inputs: a damaged PNG, an image over
the pixel cap, a PDF over the page cap. Each file is read the way a build reads it: an image
through its reader (`engine.readers`), every other file through `engine.datasets.iter_dataset`,
with the corpus's `ReadOptions`.

    .venv/bin/python -m bench.ingest               # five scanned half pages: minutes on 2 busy cores
    .venv/bin/python -m bench.ingest --pages 3 --keep /tmp/ingest
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.data.scans import lines_per_page, python_doc_paragraphs, render_page, save_image_pdf  # noqa: E402

PUBLIC_PDFS = ("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
               "/usr/share/doc/libtasn1-doc/libtasn1.pdf")
HALF_A4 = (8.27, 5.85)  # half a page keeps the default run short; the text is still 11 pt at its dpi
SCAN = {"skew": 1.0, "noise": 12.0, "size_inches": HALF_A4}


def _scans(folder: Path, text: str, pages: int) -> dict[str, tuple[int, str]]:
    """The scans of `text` (split over `pages` half pages) → {file name: (dpi, the text drawn)}."""
    lines = textwrap.wrap(text, width=80)
    per_page = lines_per_page(150, size_inches=HALF_A4)  # the same at 300 dpi, within a line's rounding
    chunks = [" ".join(lines[n * per_page:(n + 1) * per_page]) for n in range(pages)]
    truth: dict[str, tuple[int, str]] = {}
    for dpi in (150, 300):
        rendered = [render_page(chunk, dpi, seed=n, **SCAN) for n, chunk in enumerate(chunks)]
        images, first = [image for image, _ in rendered], rendered[0][1]
        if dpi == 150:
            images[0].save(folder / "scan-150.png")
            images[0].save(folder / "scan-150.webp", lossless=True)
            truth |= {"scan-150.png": (dpi, first), "scan-150.webp": (dpi, first)}
            continue
        drawn = "\n".join(text for _, text in rendered)
        images[0].convert("RGB").save(folder / "scan-300.jpg", quality=85)
        images[0].save(folder / "scan-300.tiff", save_all=True, append_images=images[1:],
                       compression="tiff_deflate")
        save_image_pdf(images, folder / "scan-300.pdf", dpi)
        truth |= {"scan-300.jpg": (dpi, first), "scan-300.tiff": (dpi, drawn), "scan-300.pdf": (dpi, drawn)}
    return truth


def _documents(folder: Path, paragraphs: list[str]) -> None:
    """The real documents of other kinds, and the bad inputs."""
    import shutil

    import docx
    from PIL import Image
    from pypdf import PdfWriter

    for source in PUBLIC_PDFS:
        if Path(source).is_file():
            shutil.copy(source, folder / Path(source).name)
    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    document.save(folder / "prose.docx")
    (folder / "prose.md").write_text("".join(f"## Part {n}\n\n{p}\n\n" for n, p in enumerate(paragraphs)))
    (folder / "prose.txt").write_text("\n\n".join(paragraphs))
    (folder / "prose.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs))
    whole = folder / "scan-150.png"  # a scan cut short: a damaged file
    (folder / "damaged.png").write_bytes(whole.read_bytes()[: whole.stat().st_size // 3])
    Image.new("1", (20_000, 20_000), 1).save(folder / "huge.png")
    writer = PdfWriter()
    for _ in range(5_001):
        writer.add_blank_page(width=72, height=72)
    writer.write(folder / "huge.pdf")


def read_file(path: Path, options: object) -> tuple[str, list[str], set[int]]:
    """(format, the texts read in order, the pages seen) of one file, read as a build reads it."""
    from engine.datasets import iter_dataset, sniff_format
    from engine.readers import reader_for

    with path.open("rb") as handle:
        head = handle.read(16)
    reader = reader_for(head, path.suffix)
    if reader is not None:
        parts = list(reader.read(path, options))
        return reader.name, [part.text for part in parts], {part.place.get("page", 1) for part in parts}
    fmt = sniff_format(path)
    records = list(iter_dataset(path, options=options))
    pages = {record["metadata"]["page"] for record in records if "page" in record["metadata"]}
    return fmt, [record["text"] for record in records], pages


def _cer(texts: list[str], truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    got, want = " ".join(" ".join(texts).split()), " ".join(truth.split())
    return Levenshtein.distance(got, want) / max(1, len(want))


def _ingest(folder: Path, options: object) -> tuple[dict, list[tuple[str, str, str]]]:
    """Read every file of `folder` → ({format: [units, seconds, CPU seconds]} of the files read, and
    (file, "read" | "refused" | "FAILED", detail) for each file)."""
    from engine.datasets import DatasetError
    from engine.readers import DocumentError

    rates: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    outcomes, texts = [], {}
    for path in sorted(folder.iterdir()):
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            fmt, read, pages = read_file(path, options)
        except (DocumentError, DatasetError) as error:
            outcomes.append((path.name, "refused", str(error).replace(str(path), path.name)[:110]))
            continue
        except Exception as error:  # noqa: BLE001 - a reader that fails without a reason is what this counts
            outcomes.append((path.name, "FAILED", f"{type(error).__name__}: {error}"[:110]))
            continue
        seconds = time.perf_counter() - started
        units = len(pages) or len(read)
        rates[fmt][0] += units
        rates[fmt][1] += seconds
        rates[fmt][2] += time.process_time() - cpu_started
        texts[path.name] = read
        unit = "pages" if pages else "records"
        outcomes.append((path.name, "read", f"{fmt}, {units} {unit} in {seconds:.1f} s"))
    return {"rates": rates, "texts": texts}, outcomes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1, help="half pages of text in the TIFF and the PDF")
    parser.add_argument("--keep", type=Path, help="assemble the folder here and keep it")
    args = parser.parse_args(argv)
    from engine.readers import ReadOptions

    print_hardware()
    paragraphs = python_doc_paragraphs(4)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        truth = _scans(folder, " ".join(paragraphs), args.pages)
        _documents(folder, paragraphs)
        found, outcomes = _ingest(folder, ReadOptions())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for name, outcome, detail in outcomes:
        print(f"  {name:36} {outcome:8} {detail}")
    read = sum(outcome == "read" for _, outcome, _ in outcomes)
    refused = sum(outcome == "refused" for _, outcome, _ in outcomes)
    print(f"\nfiles: {len(outcomes)}; read {read} ({read / len(outcomes):.0%}), refused with a reason "
          f"{refused} ({refused / len(outcomes):.0%}), failed without one {len(outcomes) - read - refused}")
    print("\nper format (pages or records a second of the files read; CPU seconds of this process, all its "
          "threads, for each):")
    for fmt, (units, seconds, cpu) in sorted(found["rates"].items()):
        print(f"  {fmt:8} {units / seconds:9.2f} /s  ({units:g} in {seconds:.1f} s; "
              f"{cpu / units:.2f} CPU s each)")
    print("\nOCR character error rate against the text drawn:")
    for dpi in (150, 300):
        rates = [(name, _cer(found["texts"][name], text)) for name, (at, text) in truth.items()
                 if at == dpi and name in found["texts"]]
        listed = ", ".join(f"{name} {rate:.2%}" for name, rate in rates)
        mean = sum(rate for _, rate in rates) / max(1, len(rates))
        print(f"  {dpi} dpi: mean {mean:.2%} ({listed})")
    print(f"\npeak RSS of this process (the reading worker): {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
