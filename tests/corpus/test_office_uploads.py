"""End to end: a spreadsheet and a presentation in one ZIP, uploaded through the portal, built, and
found by search, each hit naming its place; a broken office file refused alone, the rest kept."""

from __future__ import annotations

from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from engine.places import place_label
from tests.corpus.test_batch_uploads import zip_bytes
from tests.office_files import encrypted, pptx_file, xlsx_file
from tests.plugins.portal import build_now, login

OLE = Path(__file__).resolve().parents[1] / "fixtures" / "mail" / "nested.msg"
INVENTORY = [["Warehouse", "Part", "Count"], ["Leeds", "flange gaskets", 40],
             ["Bristol", "sprocket chains", 12]]
SLIDES = [{"title": "Safety review", "body": ["Incidents fell by a third"]},
          {"title": "Next steps", "body": ["Train the night shift"],
           "notes": "Remind everyone that the forklift certification expires in March"}]


def test_zip_of_xlsx_and_pptx_builds_and_search_finds_a_row_and_a_slides_notes(
        corpus, owner, outsider, tmp_path, django_capture_on_commit_callbacks):
    workbook = xlsx_file(tmp_path / "stock.xlsx", {"Inventory": INVENTORY})
    deck = pptx_file(tmp_path / "review.pptx", SLIDES)
    locked = encrypted(xlsx_file(tmp_path / "plain.xlsx", {"Secret": INVENTORY}), tmp_path / "locked.xlsx")
    members = {"team/stock.xlsx": workbook, "team/review.pptx": deck, "team/locked.xlsx": locked}
    archive = zip_bytes({**{name: path.read_bytes() for name, path in members.items()},
                         "team/old.doc": OLE.read_bytes()})  # an OLE container under an old Word name
    client = login(owner)
    response = client.post(reverse("corpus:dataset_add", args=[corpus.pk]),
                           {"file": SimpleUploadedFile("drive.zip", archive)},
                           headers={"Accept": "application/json"})
    results = {r["name"]: r for r in response.json()["results"]}
    assert results["team/stock.xlsx"]["format"] == "xlsx" and results["team/review.pptx"]["format"] == "pptx"
    assert "password-protected" in results["team/locked.xlsx"]["error"]  # refused alone, the rest stored
    assert "save it as a Word document (DOCX)" in results["team/old.doc"]["error"]
    assert "Excel, 1 record" in results["team/stock.xlsx"]["message"]
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded"

    def top_hit(question: str) -> dict:
        found = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": question})
        assert found.status_code == 200
        return found.json()["results"][0]

    row = top_hit("sprocket chains Bristol")
    assert "Warehouse: Bristol; Part: sprocket chains; Count: 12" in row["text"]
    assert place_label(row["metadata"]) == "Inventory!A2:C3" and row["metadata"]["format"] == "xlsx"
    notes = top_hit("forklift certification expires")
    assert notes["metadata"]["slide"] == 2 and "Notes: Remind everyone" in notes["text"]
    assert place_label(notes["metadata"]) == "slide 2"
    # An outsider sees neither the corpus nor its hits.
    assert login(outsider).get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": "sprocket"}).status_code == 404


def test_every_kind_of_source_keeps_the_office_formats():
    from corpus.sources.reading import PathFilter

    wanted = PathFilter()
    assert all(wanted.wants(f"shared/drive/file{suffix}") for suffix in
               (".xlsx", ".ods", ".csv", ".tsv", ".pptx", ".odp", ".odt", ".epub", ".docx", ".pdf"))
    assert not wanted.wants("shared/drive/old.xls")


def test_a_folder_source_reads_office_files_and_names_a_locked_one(
        corpus, owner, member, settings, tmp_path, django_capture_on_commit_callbacks):
    from corpus.sources.services import source_create
    from tests.corpus.sources import found, sync

    root = tmp_path / "shared"
    drive = root / "team"
    drive.mkdir(parents=True)
    settings.SOURCE_ROOTS = [str(root)]
    xlsx_file(drive / "stock.xlsx", {"Inventory": INVENTORY})
    pptx_file(drive / "review.pptx", SLIDES)
    encrypted(xlsx_file(tmp_path / "plain.xlsx", {"Secret": INVENTORY}), drive / "locked.xlsx")
    source = source_create(corpus=corpus, user=owner, name="drive", kind="folder", location=str(drive))
    sync(source, django_capture_on_commit_callbacks)
    assert source.added == 2, (source.error, source.failures)
    assert [f["name"] for f in source.failures] == ["locked.xlsx"]
    assert "password-protected" in source.failures[0]["reason"]
    assert sorted(corpus.datasets.values_list("format", flat=True)) == ["pptx", "xlsx"]
    assert found(member, corpus, "forklift certification expires in March")
