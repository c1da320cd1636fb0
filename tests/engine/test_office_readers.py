"""Spreadsheets, slides, ODT, EPUB and DOCX sections through the readers' registry: real files made by
the formats' own libraries (tests/office_files.py), each memory with its place; bad files refused with
a reason a person can act on."""

from __future__ import annotations

import re
import resource
import zipfile
from pathlib import Path

import pytest

from engine.datasets import DatasetError, iter_dataset, sniff_format, validate_dataset
from engine.readers import DocumentError, ReadOptions, reader_for
from engine.readers.sheets import read_csv, read_xlsx
from tests.office_files import (
    docx_with_headings,
    encrypted,
    epub_file,
    odp_file,
    ods_file,
    odt_file,
    pptx_file,
    xlsx_file,
)

SALES = [["Region", "Product", "Units"], ["North", "Kettles", 120], ["South", "Toasters", 80]]
SLIDES = [{"title": "Quarterly review", "body": ["Revenue grew in every region"]},
          {"title": "Budget", "table": [["Team", "Budget"], ["Research", 4000]],
           "notes": "Mention the hiring freeze before the budget table"}]


def places(records: list[dict], *keys: str) -> list[tuple]:
    return [tuple(r["metadata"].get(key) for key in keys) for r in records]


def test_xlsx_rows_are_read_with_their_headers_sheet_and_cells(tmp_path):
    path = xlsx_file(tmp_path / "sales.xlsx", {"Sales": SALES, "Costs": [[], [None, "Item", "Cost"],
                                                                          [None, "Rent", 5000]]})
    assert sniff_format(path) == "xlsx"
    records = list(iter_dataset(path))
    assert [r["text"] for r in records] == ["Region: North; Product: Kettles; Units: 120\n"
                                            "Region: South; Product: Toasters; Units: 80",
                                            "Item: Rent; Cost: 5000"]
    # Rows and columns as the sheet numbers them: the Costs header stands in row 2 from column B.
    assert places(records, "sheet", "rows", "columns") == [("Sales", [2, 3], [1, 3]),
                                                           ("Costs", [3, 3], [2, 3])]
    assert {r["metadata"]["format"] for r in records} == {"xlsx"}


def test_ods_and_csv_rows_with_their_headers(tmp_path):
    ods = ods_file(tmp_path / "sales.ods", {"Sales": SALES})
    assert sniff_format(ods) == "ods"
    [record] = iter_dataset(ods)
    assert record["text"].splitlines()[1] == "Region: South; Product: Toasters; Units: 80"
    assert places([record], "sheet", "rows", "columns") == [("Sales", [2, 3], [1, 3])]
    shifted = ods_file(tmp_path / "shifted.ods", {"S": [["", ""], ["", "", "Region", "Sales"],
                                                        ["", "", "North", 12]]})
    assert places(list(iter_dataset(shifted)), "rows", "columns") == [([3, 3], [3, 4])]  # "S!C3:D3"
    semicolons = tmp_path / "stock.csv"
    semicolons.write_text("Item;Shelf;Count\nBolts;A4;300\nNuts;A5;120\n", encoding="utf-8-sig")
    assert sniff_format(semicolons) == "csv"
    [record] = iter_dataset(semicolons)
    assert record["text"] == "Item: Bolts; Shelf: A4; Count: 300\nItem: Nuts; Shelf: A5; Count: 120"
    assert places([record], "sheet", "rows") == [("stock", [2, 3])]
    tabs = tmp_path / "stock.tsv"
    tabs.write_text("Item\tCount\nWashers, steel\t9\n")
    assert [r["text"] for r in iter_dataset(tabs)] == ["Item: Washers, steel; Count: 9"]


def test_rows_are_grouped_into_bounded_parts(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("Day,Note\n" + "".join(f"{day},visited site {day}\n" for day in range(1, 201)))
    records = list(iter_dataset(path, chunk_size=4096))
    assert [r["metadata"]["rows"] for r in records] == [[2, 51], [52, 101], [102, 151], [152, 201]]
    assert records[1]["text"].startswith("Day: 51; Note: visited site 51\n")


def test_slides_keep_title_body_tables_and_notes(tmp_path):
    for path in (pptx_file(tmp_path / "review.pptx", SLIDES), odp_file(tmp_path / "review.odp", SLIDES)):
        assert sniff_format(path) == path.suffix[1:]
        records = list(iter_dataset(path))
        assert places(records, "slide") == [(1,), (2,)]
        assert records[0]["text"] == "Quarterly review\nRevenue grew in every region"
        assert records[1]["text"] == ("Budget\nTeam: Research; Budget: 4000\n\n"
                                      "Notes: Mention the hiring freeze before the budget table")


def test_odt_docx_and_epub_keep_their_heading_path(tmp_path):
    blocks = [(1, "Field guide"), (None, "Birds of the coast."), (2, "Gulls"),
              (None, "Gulls nest on cliffs."), [["Species", "Length"], ["Herring gull", "60 cm"]]]
    odt, docx = odt_file(tmp_path / "guide.odt", blocks), docx_with_headings(tmp_path / "guide.docx", blocks)
    for path in (odt, docx):
        records = list(iter_dataset(path))
        assert places(records, "headings") == [(["Field guide"],), (["Field guide", "Gulls"],)], path.name
        assert records[1]["text"] == "Gulls\n\nGulls nest on cliffs.\n\nSpecies: Herring gull; Length: 60 cm"
    book = epub_file(tmp_path / "notes.epub", [("Rivers", "<p>Water flows downhill.</p>"),
                                               ("Lakes", "<p>Water rests in basins.</p>")])
    assert sniff_format(book) == "epub"
    records = list(iter_dataset(book))
    assert [(r["text"], r["metadata"]["headings"]) for r in records] == [
        ("Rivers\nWater flows downhill.", ["Rivers"]), ("Lakes\nWater rests in basins.", ["Lakes"])]


def test_opendocument_and_epub_are_known_by_content_without_their_name(tmp_path):
    ods_file(tmp_path / "sales.ods", {"Sales": SALES}).rename(tmp_path / "export")
    assert sniff_format(tmp_path / "export") == "ods"
    # An office file's name on other content, and a ZIP's name on an office file, are not that format.
    (tmp_path / "fake.xlsx").write_text("Region,Sales\n")
    with pytest.raises(DatasetError, match=r"not an Excel \(XLSX\) file"):
        sniff_format(tmp_path / "fake.xlsx")
    with pytest.raises(DatasetError, match="a ZIP archive is not one dataset"):
        sniff_format(xlsx_file(tmp_path / "sales.xlsx", {"Sales": SALES}).read_bytes(), "bundle.zip")


def test_a_password_protected_workbook_says_so(tmp_path):
    plain = xlsx_file(tmp_path / "plain.xlsx", {"Sales": SALES})
    locked = encrypted(plain, tmp_path / "locked.xlsx")
    assert not zipfile.is_zipfile(locked)  # an OLE compound file, as Office writes it
    with pytest.raises(DatasetError, match="password-protected .*remove the password"):
        validate_dataset(locked)


def test_damaged_office_files_are_refused_with_a_reason(tmp_path):
    for path in (xlsx_file(tmp_path / "cut.xlsx", {"Sales": SALES}), pptx_file(tmp_path / "cut.pptx", SLIDES),
                 odt_file(tmp_path / "cut.odt", [(None, "text")])):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])  # a real file cut short, as an interrupted copy leaves it
        with pytest.raises(DatasetError, match=r"damaged .* file: its ZIP directory is missing"):
            validate_dataset(path)
    with zipfile.ZipFile(tmp_path / "other.pptx", "w") as archive:
        archive.writestr("readme.txt", "not a presentation")
    with pytest.raises(DatasetError,
                       match=r"not a PowerPoint \(PPTX\) file: the package has no ppt/presentation.xml"):
        validate_dataset(tmp_path / "other.pptx")


def test_an_old_binary_office_file_is_refused_with_what_to_save_it_as(tmp_path):
    # An OLE compound file, the container of DOC, XLS and PPT (here a real Outlook message's bytes,
    # tests/fixtures/mail/nested.msg: the refusal reads no more than the container's signature).
    ole = (Path(__file__).resolve().parents[1] / "fixtures" / "mail" / "nested.msg").read_bytes()
    for name, saved_as in (("minutes.doc", "Word document (DOCX)"), ("budget.xls", "Excel workbook (XLSX)"),
                           ("review.ppt", "PowerPoint presentation (PPTX)")):
        path = tmp_path / name
        path.write_bytes(ole)
        reason = (rf"an older binary Office file \({Path(name).suffix}\), which the portal does not read: "
                  rf".* save it as a {re.escape(saved_as)}")
        with pytest.raises(DatasetError, match=reason):
            validate_dataset(path)


def test_the_archive_caps_apply_before_a_package_is_opened(tmp_path):
    path = xlsx_file(tmp_path / "sales.xlsx", {"Sales": SALES})
    reader = reader_for(path.read_bytes()[:64], ".xlsx")
    with pytest.raises(DocumentError, match="expands to .* bytes, more than the limit of 1,000"):
        list(reader.read(path, ReadOptions(max_expanded_bytes=1000)))
    with pytest.raises(DocumentError, match="parts, more than the limit of 3"):
        list(reader.read(path, ReadOptions(max_members=3)))


def test_a_sheet_over_max_rows_is_refused_with_the_limit(tmp_path):
    rows = [["Id", "Name"]] + [[i, f"row {i}"] for i in range(30)]
    path = xlsx_file(tmp_path / "long.xlsx", {"Data": rows})
    with pytest.raises(DocumentError, match="'Data' of the Excel .* more than 20 rows"):
        list(read_xlsx(path, ReadOptions(max_rows=20)))
    assert len(list(read_xlsx(path, ReadOptions(max_rows=40)))) == 1


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_100000_row_csv_streams(tmp_path):
    path = tmp_path / "visits.csv"
    with open(path, "w") as out:
        out.write("Visit,Town,Note\n")
        for i in range(1, 100_001):
            out.write(f"{i},Town {i % 97},a note of some length for visit number {i}\n")
    parts = read_csv(path, ReadOptions())
    first = next(parts)
    assert first.place["rows"][0] == 2
    *rest, last = parts
    assert last.place == {"sheet": "visits", "rows": [last.place["rows"][0], 100_001], "columns": [1, 3]}
    assert last.share == 1.0
    # An upload's check reads the first 200 parts and extrapolates the rest from their share of bytes.
    report = validate_dataset(path)
    assert report["records_checked"] == 200 and not report["complete"]
    assert abs(report["record_estimate"] - (len(rest) + 2)) < 0.05 * (len(rest) + 2)


@pytest.mark.slow
@pytest.mark.parametrize("rows", [100_000])
def test_heavy_a_100000_row_xlsx_streams_in_bounded_memory(tmp_path, rows):
    """Heavy (about a minute on a loaded 2-core machine): openpyxl writes and reads 100,000 rows."""
    path = xlsx_file(tmp_path / "big.xlsx", {"Visits": ([["Visit", "Town"]] + [[i, f"Town {i % 97}"]
                                                                            for i in range(1, rows + 1)])})
    before = _peak_mib()
    count = last = 0
    for part in read_xlsx(path, ReadOptions()):
        count, last = count + 1, part.place["rows"][1]
    assert last == rows + 1 and count == rows // 50
    # The process's peak grew by far less than the sheet's cells would take held whole.
    assert _peak_mib() - before < 60


def test_a_document_past_its_time_cap_is_refused_with_the_limit(tmp_path):
    deck = pptx_file(tmp_path / "review.pptx", SLIDES)
    reader = reader_for(deck.read_bytes()[:64], ".pptx")
    with pytest.raises(DocumentError, match=r"\(PPTX\) file took longer than the limit of 0 seconds"):
        list(reader.read(deck, ReadOptions(max_seconds=0)))
    assert len(list(reader.read(deck, ReadOptions()))) == 2
