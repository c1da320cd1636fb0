"""E-mail: EML, MBOX and MSG read as messages (body text, sender, recipients, date, subject) with each
attachment read as a document of its own; real messages from CPython's test data (tests/fixtures/mail)."""

from __future__ import annotations

import mailbox
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from engine.datasets import DatasetError, iter_dataset, sniff_format, validate_dataset
from engine.readers import DocumentError, ReadOptions, reader_for
from engine.readers.mail import read_eml, read_mbox, sniff_eml
from tests.documents import pdf_bytes

MAIL = Path(__file__).resolve().parents[1] / "fixtures" / "mail"
ROOT = Path(__file__).resolve().parents[2]


def real(number: str) -> bytes:
    return (MAIL / f"msg_{number}.txt").read_bytes()


def parsed(number: str) -> EmailMessage:
    return BytesParser(policy=policy.default).parsebytes(real(number))


def read(path: Path) -> tuple[list, list[tuple[dict, str]]]:
    skips: list[tuple[dict, str]] = []
    reader = reader_for(path.read_bytes()[:65536], path.suffix)
    assert reader is not None
    parts = list(reader.read(path, ReadOptions(on_skip=lambda place, reason: skips.append((place, reason)))))
    return parts, skips


def test_a_real_message_gives_its_body_and_its_header_as_metadata(tmp_path):
    path = tmp_path / "test.eml"
    path.write_bytes(real("01"))
    assert sniff_format(path) == "eml"
    (record,) = iter_dataset(path)
    assert record["text"] == "Hi,\n\nDo you like this message?\n\n-Me"
    metadata = record["metadata"]
    assert metadata["format"] == "eml" and metadata["message"] == "This is a test message"
    assert metadata["subject"] == "This is a test message"
    assert metadata["mail_from"] == "bbb@ddd.com" and metadata["mail_to"] == "bbb@zzz.org"
    assert metadata["mail_date"] == "2001-05-04T14:05:44-04:00"


def test_a_mail_under_a_text_name_is_read_as_mail_and_a_yaml_with_from_and_to_is_not(tmp_path):
    (tmp_path / "saved.txt").write_bytes(real("01"))
    assert sniff_format(tmp_path / "saved.txt") == "eml"
    (tmp_path / "route.yaml").write_text("from: build\nto: deploy\nsubject: nightly\n")
    assert sniff_format(tmp_path / "route.yaml") == "code"


def test_headers_and_encoded_data_never_reach_the_text(tmp_path):
    path = tmp_path / "fish.eml"
    path.write_bytes(real("07"))  # a GIF attachment in base64
    parts, skips = read(path)
    text = "\n".join(part.text for part in parts)
    assert "This is the dingus fish." in text
    assert "Content-Type" not in text and "base64" not in text and "R0lGODdh" not in text
    (place, reason), = skips
    assert place["attachment"] == "dingusfish.gif" and place["message"] == "Here is your dingus fish"
    assert "no reader" in reason and "image/gif" in reason


def test_an_html_body_is_read_as_its_text(tmp_path):
    html = MarkdownIt().render((ROOT / "docs" / "guide.md").read_text())  # real HTML from a real renderer
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "ana@example.org", "team@example.org", "The guide"
    message.set_content(html, subtype="html")
    path = tmp_path / "guide.eml"
    path.write_bytes(message.as_bytes())
    parts, _ = read(path)
    text = "\n".join(part.text for part in parts)
    assert "Using the portal" in text and "<h1>" not in text and "</p>" not in text
    assert {part.place["message"] for part in parts} == {"The guide"}


def test_a_pdf_attachment_is_read_by_the_pdf_reader_with_its_place(tmp_path):
    message = EmailMessage()
    message["From"], message["To"] = "Ana <ana@example.org>", "Bo <bo@example.org>"
    message["Subject"], message["Date"] = "Budget plan", "Tue, 03 Mar 2026 09:30:00 +0100"
    message.set_content("The plan is attached.\n")
    pdf = pdf_bytes([["Travel costs fall by a third."], ["Hardware renewals move to the autumn."]])
    message.add_attachment(pdf, maintype="application", subtype="pdf", filename="plan.pdf")
    path = tmp_path / "plan.eml"
    path.write_bytes(message.as_bytes())
    records = list(iter_dataset(path, chunk_size=256))
    body, *attached = records
    assert body["text"] == "The plan is attached." and "attachment" not in body["metadata"]
    assert [r["metadata"]["page"] for r in attached] == [1, 2]
    assert "Hardware renewals move to the autumn." in attached[1]["text"]
    for record in attached:
        metadata = record["metadata"]
        assert metadata["attachment"] == "plan.pdf" and metadata["message"] == "Budget plan"
        assert metadata["mail_from"] == "Ana <ana@example.org>"
        assert metadata["mail_date"] == "2026-03-03T09:30:00+01:00"


def test_a_scanned_attachment_is_left_to_ocr_at_build_and_the_mail_is_accepted(tmp_path):
    from bench.data.scans import render_page

    image = render_page("Volcanic ash clouds ground aircraft.", 150, size_inches=(4.0, 0.8), columns=50,
                        margin_inches=0.2)[0]
    png = tmp_path / "scan.png"
    image.save(png)
    message = EmailMessage()
    message["From"], message["Subject"] = "Ana <ana@example.org>", "The scan"
    message.add_attachment(png.read_bytes(), maintype="image", subtype="png", filename="scan.png")
    path = tmp_path / "scan.eml"
    path.write_bytes(message.as_bytes())
    report = validate_dataset(path)  # the upload: the attachment is checked, not read by OCR
    assert (report["records_valid"], report["ocr_pending"], report["record_estimate"]) == (0, 1, 1)
    [record] = iter_dataset(path)  # the build: OCR reads it, with the mail's and the page's place
    assert "aircraft" in record["text"]
    assert record["metadata"]["attachment"] == "scan.png" and record["metadata"]["page"] == 1


def test_forwarded_messages_and_digests_are_read_with_the_forwarding_message_named(tmp_path):
    path = tmp_path / "digest.eml"
    path.write_bytes(real("02"))
    parts, _ = read(path)
    assert {part.place["message"] for part in parts} == {"Ppp digest, Vol 1 #2 - 5 msgs"}
    forwarded = [part.place["attachment"] for part in parts if "attachment" in part.place]
    assert "forwarded message “[Ppp] testing #1”" in forwarded


def test_an_undecodable_part_is_skipped_with_its_reason_and_the_rest_is_read(tmp_path):
    message = parsed("01")
    message.make_mixed()
    message.add_attachment(b"Minutes of the meeting", maintype="text", subtype="plain",
                           filename="minutes.txt")
    message.add_attachment(b"caf\xe9 au lait", maintype="text", subtype="plain", filename="menu.txt")
    *_, menu = message.iter_attachments()
    menu.set_param("charset", "x-no-such-charset")
    path = tmp_path / "mixed.eml"
    path.write_bytes(message.as_bytes())
    errors: list = []
    records = list(iter_dataset(path, errors=errors))
    assert [r["text"] for r in records] == ["Hi,\n\nDo you like this message?\n\n-Me",
                                            "Minutes of the meeting"]
    assert records[1]["metadata"]["attachment"] == "minutes.txt"
    (issue,) = errors
    assert issue.kind == "part" and "menu.txt" in issue.message and "x-no-such-charset" in issue.message


def write_mbox(path: Path, numbers: list[str]) -> None:
    box = mailbox.mbox(path)
    for number in numbers:
        box.add(real(number))
    box.close()


def test_an_mbox_is_read_one_message_at_a_time(tmp_path):
    path = tmp_path / "archive.mbox"
    write_mbox(path, ["01", "04", "10", "26"])
    assert sniff_format(path) == "mbox"
    parts = list(read_mbox(path, ReadOptions()))
    subjects = [part.place["message"] for part in parts]
    assert subjects[0] == "This is a test message" and subjects[-1] == "IMAP file test"
    assert {"a simple multipart", "Lyrics"} <= set(subjects)
    shares = [part.share for part in parts]
    assert shares == sorted(shares) and shares[0] == 0.25 and shares[-1] == 1.0
    # Without a name, the "From " separator and the header under it say it is a mailbox.
    (tmp_path / "archive").write_bytes(path.read_bytes())
    assert sniff_format(tmp_path / "archive") == "mbox"


def test_a_truncated_mbox_reads_every_message_and_names_the_one_cut_short(tmp_path):
    path = tmp_path / "cut.mbox"
    write_mbox(path, ["01", "04", "07"])
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"R0lGODdh") + 200])  # inside the last message's GIF
    errors: list = []
    records = list(iter_dataset(path, errors=errors))
    subjects = [r["metadata"]["message"] for r in records]
    assert subjects[0] == "This is a test message" and "a simple multipart" in subjects
    assert records[-1]["text"] == "Hi there,\n\nThis is the dingus fish."
    assert any("“Here is your dingus fish”" in issue.message and "cut short" in issue.message
               for issue in errors)
    report = validate_dataset(path)
    assert report["format"] == "mbox" and report["complete"] and report["records_valid"] == len(records)


def test_mail_names_with_other_content_are_refused_with_the_reason(tmp_path):
    for name, kind in (("notes.eml", "an e-mail message"), ("box.mbox", "a mailbox"),
                       ("outlook.msg", "an Outlook message")):
        path = tmp_path / name
        path.write_text("Quarterly numbers, first draft.\n")
        with pytest.raises(DatasetError, match=kind):
            sniff_format(path)
    with pytest.raises(DocumentError, match="an e-mail message"):
        sniff_eml(b"%PDF-1.7", ".eml")


def test_an_empty_mbox_and_a_message_without_text_say_so(tmp_path):
    path = tmp_path / "empty.mbox"
    path.write_bytes(b"")
    with pytest.raises(DatasetError, match="file is empty"):
        validate_dataset(path)
    path.write_bytes(b"From nobody Thu Jan  1 00:00:00 2026\nSubject: nothing\nTo: team@example.org\n\n")
    with pytest.raises(DatasetError, match="no readable records"):
        validate_dataset(path)
    path.write_bytes(b"Quarterly numbers, first draft.\n")  # no "From " line: the reader finds no message
    with pytest.raises(DocumentError, match="no messages"):
        list(read_mbox(path, ReadOptions()))
    gif_only = parsed("07")
    for part in list(gif_only.iter_parts()):
        if part.get_content_maintype() == "text":
            part.set_content("")
    only = tmp_path / "only.eml"
    only.write_bytes(gif_only.as_bytes())
    with pytest.raises(DatasetError, match="dingusfish.gif"):
        validate_dataset(only)


def test_eml_reader_reads_a_message_with_only_a_forwarded_message(tmp_path):
    path = tmp_path / "forward.eml"
    path.write_bytes(real("16"))  # a delivery report returning the message it could not deliver
    parts = list(read_eml(path, ReadOptions()))
    assert parts[0].place["message"] == "Delivery Notification: Delivery has failed"
    assert any(part.place.get("attachment") == "forwarded message “[scr] yeah for Ians!!”" for part in parts)


def test_a_mailbox_over_its_time_cap_stops_with_the_reason(tmp_path):
    path = tmp_path / "archive.mbox"
    write_mbox(path, ["01", "04"])
    with pytest.raises(DocumentError, match=r"reading stopped at message \d of 2: over the 0 s"):
        list(read_mbox(path, ReadOptions(max_seconds=0)))


@pytest.mark.parametrize("sender", [b"<", b"a@["])  # headers the stdlib's parser raises on
def test_a_header_the_parser_trips_over_is_left_empty_and_the_message_read(tmp_path, sender):
    path = tmp_path / "mangled.eml"
    path.write_bytes(real("01").replace(b"From: bbb@ddd.com (John X. Doe)", b"From: " + sender))
    (part,) = read_eml(path, ReadOptions())
    assert part.text.strip() == "Hi,\n\nDo you like this message?\n\n-Me" and part.place["mail_from"] == ""
    assert part.place["subject"] == "This is a test message"


def test_a_real_outlook_message_gives_its_header_body_forwarded_message_and_attachment():
    """failure_notice.msg: a real Outlook MSG from msg-parser's test files (BSD 2-clause; see
    tests/fixtures/mail/README.md): a bounce whose attachment is the bounced Outlook message, which
    carries a PDF of four pages."""
    path = MAIL / "failure_notice.msg"
    assert sniff_format(path) == "msg"
    parts, skips = read(path)
    assert skips == []
    body, forwarded, *pdf = parts
    header = {"message": "投递状态通知 (Failure Notice)", "subject": "投递状态通知 (Failure Notice)",
              "mail_from": "Mail Delivery Subsystem <mailer-daemon@tjdpf.org.cn>",
              "mail_to": "yosipnps@model.com", "mail_date": "2017-11-27T17:44:30+08:00"}
    assert body.place == header
    assert body.text.startswith("Hi. This is an automatically generated Delivery Status Notification")
    assert "recipient: \nhp_lsz@tjdpf.org.cn" in body.text
    # The bounced message, an Outlook message attached to this one, is read with its own text.
    assert forwarded.place == {**header, "attachment": "default_attachment.eml"}
    assert forwarded.text.startswith("Meredith\n\nFYI...")
    attachment = "北京 2017年12月02-03日 销售主管 确认n.pdf"
    assert [(part.place["attachment"], part.place["page"]) for part in pdf] == [(attachment, n) for n in
                                                                               range(1, 5)]
    assert "销售主管" in pdf[0].text
    report = validate_dataset(path)
    assert report["format"] == "msg" and report["records_valid"] == len(parts)


def test_an_outlook_message_kept_without_transport_headers_keeps_its_subject_and_attached_message():
    """nested.msg (msg-parser's outer.msg, BSD 2-clause): an Outlook message with no transport
    headers, carrying another Outlook message as an attachment (test.msg)."""
    parts, skips = read(MAIL / "nested.msg")
    assert skips == []
    assert [(part.text, part.place.get("attachment")) for part in parts] == [("Outer body\n", None),
                                                                             ("body\n", "test.msg")]
    assert {part.place["subject"] for part in parts} == {"outer subject"}
    assert parts[0].place["mail_to"] == "outer@foo.bar"
