"""PDF and DOCX datasets: sniffed by content, text extracted, PDF page numbers in the metadata, tables as
rows with their headers."""

from __future__ import annotations

import pytest

from engine.datasets import DatasetError, iter_dataset, sniff_format, validate_dataset
from tests.documents import docx_bytes, pdf_bytes, table_pdf_bytes

PAGES = [["Photosynthesis converts light into chemical energy.", "Chlorophyll absorbs red and blue light."],
         ["The Krebs cycle runs in the mitochondrial matrix.", "It releases carbon dioxide."],
         ["Glycolysis splits glucose into two pyruvate molecules."]]


def test_pdf_pages_become_records_with_their_page_number(tmp_path):
    path = tmp_path / "biology.pdf"
    path.write_bytes(pdf_bytes(PAGES))
    assert sniff_format(path) == "pdf"
    records = list(iter_dataset(path, chunk_size=256))
    assert [r["metadata"]["page"] for r in records] == [1, 2, 3]
    assert "Chlorophyll absorbs red and blue light." in records[0]["text"]
    assert "Krebs cycle" in records[1]["text"] and "Krebs" not in records[0]["text"]
    assert [r["metadata"]["record"] for r in records] == [0, 1, 2]
    assert {r["metadata"]["format"] for r in records} == {"pdf"}


def test_long_pdf_page_is_chunked_and_every_chunk_keeps_its_page(tmp_path):
    words = [f"word{i}" for i in range(300)]
    path = tmp_path / "long.pdf"
    path.write_bytes(
        pdf_bytes([["short first page"], [" ".join(words[i : i + 10]) for i in range(0, 300, 10)]])
    )
    records = list(iter_dataset(path, chunk_size=64))
    assert records[0]["metadata"]["page"] == 1
    second = [r for r in records if r["metadata"]["page"] == 2]
    assert len(second) >= 4
    assert "word0" in second[0]["text"] and "word299" in second[-1]["text"]


def test_a_pdf_table_is_read_as_rows_with_their_headers_at_its_page_and_region(tmp_path):
    rows = [["Country", "Capital", "Population (millions)"], ["France", "Paris", "68.4"],
            ["Germany", "Berlin", "84.5"]]
    path = tmp_path / "countries.pdf"
    path.write_bytes(table_pdf_bytes("Two countries of the Union compared.", rows,
                                     "Figures from the statistics offices.",
                                     boxed="A framed note: sources and their dates."))
    before, table, after, note = iter_dataset(path, chunk_size=256)
    assert table["text"] == ("Country: France; Capital: Paris; Population (millions): 68.4\n"
                             "Country: Germany; Capital: Berlin; Population (millions): 84.5")
    left, top, right, bottom = table["metadata"]["region"]
    assert 0 <= left < right <= 1 and 0 < top < bottom < 0.5  # near the top of the page, below the text
    # The text around the table, in reading order, without the table's cells.
    assert before["text"] == "Two countries of the Union compared." and after["text"].startswith("Figures")
    assert "Berlin" not in before["text"] + after["text"]
    assert [r["metadata"]["page"] for r in (before, table, after, note)] == [1, 1, 1, 2]
    # One framed box is no grid: the page is read as any other (pypdf's text, no region).
    assert note["text"] == "A framed note: sources and their dates." and "region" not in note["metadata"]


def test_docx_paragraphs_and_tables_are_read(tmp_path):
    path = tmp_path / "report.docx"
    path.write_bytes(docx_bytes(["Quarterly revenue grew by twelve percent.", "Costs stayed flat."],
                                table=[["region", "sales"], ["north", "1200"]]))
    assert sniff_format(path) == "docx"
    records = list(iter_dataset(path))
    assert len(records) == 1
    text = records[0]["text"]
    assert "Quarterly revenue grew" in text and "Costs stayed flat." in text
    assert "region: north; sales: 1200" in text  # a table row with its header row's names
    assert "page" not in records[0]["metadata"]


def test_validation_counts_document_chunks(tmp_path):
    path = tmp_path / "biology.pdf"
    path.write_bytes(pdf_bytes(PAGES))
    report = validate_dataset(path, chunk_size=256)
    assert report["format"] == "pdf" and report["record_estimate"] == 3 and report["complete"]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("fake.pdf", b"just some text", "not a PDF file"),
    ("fake.docx", b"just some text", r"not a Word \(DOCX\) file"),
    ("broken.docx", b"PK\x03\x04not really a zip",
     r"damaged Word \(DOCX\) file: its ZIP directory is missing"),
    ("blank.pdf", None, "no readable records"),
])
def test_unreadable_documents_are_refused_with_a_clear_message(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if content is not None else pdf_bytes([[]]))
    with pytest.raises(DatasetError, match=message):
        validate_dataset(path)


def test_a_zip_that_is_not_named_docx_is_not_a_document(tmp_path):
    with pytest.raises(DatasetError, match="unsupported file type '.zip'"):
        sniff_format(b"PK\x03\x04rest", filename="bundle.zip")


def test_a_pdf_over_max_pages_is_refused_before_a_page_is_read(tmp_path):
    from engine.readers import DocumentError, ReadOptions
    from engine.readers.pdf import read

    path = tmp_path / "biology.pdf"
    path.write_bytes(pdf_bytes(PAGES))
    with pytest.raises(DocumentError, match="the PDF has 3 pages, more than the limit of 2"):
        next(read(path, ReadOptions(max_pages=2)))
    places = [part.place for part in read(path, ReadOptions(max_pages=3))]
    assert places == [{"page": 1}, {"page": 2}, {"page": 3}]
