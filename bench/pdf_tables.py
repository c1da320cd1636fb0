"""Tables in PDFs (engine.readers.pdf_tables): what finding them costs on text PDFs, and what it finds.

For each PDF: pages a CPU second through pypdf's text alone (the reader before tables, the baseline),
through PDFium's grid check alone, and through the PDF reader as it reads now (text, grid check, and
pdfplumber on the pages that draw a grid), the ratio to the baseline, and the tables found. The PDFs:
a report with a ruled table on each of its pages (written by fpdf2's table API), and the public PDFs
Debian ships in /usr/share/doc (where present). CPU seconds, the best of `--repeat` runs.

    .venv/bin/python -m bench.pdf_tables
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.encode import best_of  # noqa: E402
from bench.ingest import PUBLIC_PDFS  # noqa: E402

COUNTRIES = [["Country", "Capital", "Population (millions)", "Area (km2)"],
             ["France", "Paris", "68.4", "551,695"], ["Germany", "Berlin", "84.5", "357,022"],
             ["Italy", "Rome", "58.9", "301,340"], ["Spain", "Madrid", "48.6", "505,990"]]


def table_report(path: Path, pages: int = 10) -> Path:
    """A PDF of `pages` pages, each a paragraph, a ruled table of `COUNTRIES` and a paragraph."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("Helvetica", size=10)
    for _ in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, text="The largest countries of the European Union compared. " * 6,
                       new_x="LMARGIN", new_y="NEXT")
        pdf.ln(4)
        with pdf.table() as table:
            for cells in COUNTRIES:
                row = table.row()
                for cell in cells:
                    row.cell(cell)
        pdf.ln(4)
        pdf.multi_cell(0, 5, text="Figures from the national statistics offices. " * 6,
                       new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))
    return path


def measure(path: Path, repeat: int) -> dict:
    from pypdf import PdfReader

    from engine.readers import ReadOptions
    from engine.readers.pdf import read
    from engine.readers.pdf_tables import PdfTables

    pages = len(PdfReader(path).pages)

    def grid_check() -> int:
        tables = PdfTables(path)
        try:
            return sum(tables.ruled(number) for number in range(1, pages + 1))
        finally:
            tables.close()

    baseline, _ = best_of(repeat, lambda: [page.extract_text() for page in PdfReader(path).pages],
                          time.process_time)
    check, ruled = best_of(repeat, grid_check, time.process_time)
    full, parts = best_of(repeat, lambda: list(read(path, ReadOptions())), time.process_time)
    found = sum(1 for part in parts if "region" in part.place)
    return {"file": path.name, "pages": pages, "ruled": ruled, "tables": found,
            "baseline": pages / baseline, "check": pages / check, "now": pages / full,
            "ratio": full / baseline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print_hardware()
    with tempfile.TemporaryDirectory() as folder:
        paths = [table_report(Path(folder) / "countries.pdf")]
        paths += [Path(name) for name in PUBLIC_PDFS if Path(name).is_file()]
        print(f"{'file':34} {'pages':>5} {'grid':>4} {'tables':>6} {'pypdf p/s':>9} {'check p/s':>9} "
              f"{'now p/s':>8} {'ratio':>6}")
        for path in paths:
            row = measure(path, args.repeat)
            print(f"{row['file']:34} {row['pages']:5} {row['ruled']:4} {row['tables']:6} "
                  f"{row['baseline']:9.1f} {row['check']:9.0f} {row['now']:8.1f} {row['ratio']:5.2f}x")


if __name__ == "__main__":
    main()
