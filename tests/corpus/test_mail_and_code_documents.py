"""Mail and source code through the portal's own paths: an upload of a ZIP and a folder source, built
and searched, each memory keeping its place (message, attachment, page, lines); an outsider finds none."""

from __future__ import annotations

import mailbox
from email.message import EmailMessage
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile

from corpus.models import Memory
from corpus.services.batch_uploads import datasets_upload
from corpus.sources.services import source_create
from tests.corpus.sources import found, sync
from tests.corpus.test_batch_uploads import zip_bytes
from tests.documents import pdf_bytes
from tests.plugins.portal import build_now

ROOT = Path(__file__).resolve().parents[2]
MAIL = ROOT / "tests" / "fixtures" / "mail"
CODE = ROOT / "engine" / "dataset_chunks.py"
ATTACHED = "Hardware renewals move to the autumn."


def plan_eml() -> bytes:
    message = EmailMessage()
    message["From"], message["To"] = "Ana <ana@example.org>", "Bo <bo@example.org>"
    message["Subject"], message["Date"] = "Budget plan", "Tue, 03 Mar 2026 09:30:00 +0100"
    message.set_content("The quarterly budget plan is attached for review.\n")
    pdf = pdf_bytes([["Travel costs fall by a third."], [ATTACHED]])
    message.add_attachment(pdf, maintype="application", subtype="pdf", filename="plan.pdf")
    return message.as_bytes()


def archive_mbox(path: Path) -> bytes:
    box = mailbox.mbox(path)
    for number in ("01", "04", "10"):
        box.add((MAIL / f"msg_{number}.txt").read_bytes())
    box.close()
    return path.read_bytes()


def memories(build, name: str) -> list[Memory]:  # noqa: ANN001 - an IndexBuild
    return list(Memory.objects.filter(build=build, dataset__name=name).order_by("hdv_idx"))


def test_a_zip_of_mail_and_code_is_built_and_found_with_places(corpus, owner, member, outsider, tmp_path,
                                                                django_capture_on_commit_callbacks):
    archive = zip_bytes({"inbox/plan.eml": plan_eml(),
                         "inbox/archive.mbox": archive_mbox(tmp_path / "a.mbox"),
                         "src/dataset_chunks.py": CODE.read_bytes(),
                         "inbox/draft.eml": (ROOT / "README.md").read_bytes()})  # not a mail: refused alone
    outcomes = datasets_upload(corpus=corpus, user=owner, files=[SimpleUploadedFile("team.zip", archive)])
    refused = {o.name: o.error for o in outcomes if o.dataset is None}
    assert list(refused) == ["inbox/draft.eml"]
    assert "should hold an e-mail message" in refused["inbox/draft.eml"]
    assert {o.name: o.dataset.format for o in outcomes if o.dataset is not None} == {
        "inbox/plan.eml": "eml", "inbox/archive.mbox": "mbox", "src/dataset_chunks.py": "code"}
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded"
    plan = memories(build, "plan.eml")
    assert plan[0].metadata["message"] == "Budget plan"
    assert plan[0].metadata["mail_from"] == "Ana <ana@example.org>"
    attached = [m for m in plan if m.metadata.get("attachment") == "plan.pdf"]
    assert [m.metadata["page"] for m in attached] == [1, 2] and ATTACHED in attached[1].text
    subjects = {m.metadata["message"] for m in memories(build, "archive.mbox")}
    assert subjects >= {"This is a test message", "Lyrics"}
    code = memories(build, "dataset_chunks.py")
    lines = CODE.read_text().split("\n")
    for memory in code:
        first, last = memory.metadata["lines"]
        assert memory.text in "\n".join(lines[first - 1:last])
    for phrase in (ATTACHED, "quarterly budget plan", "Do you like this message?", "def window_bounds"):
        assert found(member, corpus, phrase), phrase
        assert not found(outsider, corpus, phrase), phrase


def test_a_folder_source_reads_mail_and_code(corpus, owner, member, settings, tmp_path,
                                             django_capture_on_commit_callbacks):
    root = tmp_path / "shared"
    folder = root / "team"
    (folder / "src").mkdir(parents=True)
    settings.SOURCE_ROOTS = [str(root)]
    (folder / "plan.eml").write_bytes(plan_eml())
    (folder / "src" / "dataset_chunks.py").write_bytes(CODE.read_bytes())
    (folder / "deploy.yaml").write_text("service: portal\nreplicas: 2\nhealthcheck: /healthz\n")
    source = source_create(corpus=corpus, user=owner, name="team", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    assert source.added == 3, (source.failures, source.error)
    for phrase in (ATTACHED, "def window_bounds", "healthcheck: /healthz"):
        assert found(member, corpus, phrase), phrase
