"""engine.datasets: extraction, sniffing, streaming readers, chunking, and error reporting."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine import dataset_chunks, dataset_formats, dataset_readers
from engine.datasets import (
    DatasetError,
    DatasetIssue,
    chunk_spans,
    content_id,
    discover_datasets,
    extract_text,
    iter_dataset,
    sniff_format,
    validate_dataset,
    window_bounds,
)


class WordTokenizer:
    """A tiny real tokenizer: each token is a word with the whitespace before it (as SentencePiece
    attaches spaces), ids assigned in order of first appearance. Round-trips text exactly."""

    special_ids: set[int] = set()

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.pieces: list[str] = []

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def tokenize(self, text: str) -> list[int]:
        tokens = []
        for piece in re.findall(r"\s*\S+|\s+$", text):
            if piece not in self.ids:
                self.ids[piece] = len(self.pieces)
                self.pieces.append(piece)
            tokens.append(self.ids[piece])
        return tokens

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenize(text) for text in texts]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def detokenize(self, tokens: list[int]) -> str:
        return "".join(self.pieces[token] for token in tokens)


def words_text(rng: random.Random, n_words: int, paragraph_every: int = 37) -> str:
    vocabulary = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "eta", "théta", "iota", "kappa", "日本"]
    parts = []
    for index in range(n_words):
        parts.append(rng.choice(vocabulary) + str(index))
        parts.append(
            "\n\n"
            if index % paragraph_every == paragraph_every - 1
            else rng.choice([" ", " ", "  ", "\t", "\n"])
        )
    return "".join(parts)


def blake(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def write_jsonl(path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- extract_text

@pytest.mark.parametrize(("item", "expected"), [
    ({"conversations": [{"from": "human", "value": " Hi? "}, {"from": "gpt", "value": "Hello."}]},
     "human: Hi?\ngpt: Hello."),
    ({"instruction": "Add.", "input": "2 and 3", "output": "5"}, "Add.\n2 and 3\n5"),
    ({"instruction": "Say hi.", "input": "", "output": "hi"}, "Say hi.\nhi"),
    ({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]},
     "system: Be brief.\nuser: Why?"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Look at"}, {"type": "image_url", "image_url": {"url": "x.png"}},
        {"type": "text", "text": "this."}]}, {"role": "assistant", "content": None}]},
     "user: Look at\nthis."),
    ({"messages": [{"content": "no role"}]}, "no role"),
    ({"prompt": "Q?", "completion": "A."}, "Q?\nA."),
    ({"text": "  raw text  "}, "raw text"),
    ({"content": "content field", "id": 3}, "content field"),
    ({"conversations": [], "text": "fallback"}, "fallback"),
    ({"conversations": [{"from": "human", "value": ""}], "messages": "not a list"}, ""),
    ({"id": 1, "label": "x"}, ""),
    ({"text": 42}, ""),
])
def test_extract_text_schemas(item, expected):
    assert extract_text(item) == expected


@pytest.mark.parametrize("item", [None, [], "text", 3])
def test_extract_text_non_objects(item):
    assert extract_text(item) == ""


# ----------------------------------------------------------------------------- windows

@pytest.mark.parametrize("chunk_size", [1, 2, 7, 8, 9, 16, 64, 1024])
@pytest.mark.parametrize("n_units", [0, 1, 5, 8, 63, 64, 65, 1000, 5000])
def test_window_bounds_cover_with_overlap(n_units, chunk_size):
    bounds = window_bounds(n_units, chunk_size)
    overlap, step = chunk_size // 8, chunk_size - chunk_size // 8
    assert bounds[0][0] == 0 and bounds[-1][1] == n_units
    if n_units <= chunk_size:
        assert bounds == [(0, n_units)]
    for index, (start, end) in enumerate(bounds):
        assert start == index * step
        assert end - start == min(chunk_size, n_units - start)
    for (_, end_prev), (start, _) in zip(bounds, bounds[1:], strict=False):
        assert end_prev - start == overlap
    assert set().union(*(range(s, e) for s, e in bounds)) == set(range(n_units))


def test_window_bounds_rejects_nonpositive():
    with pytest.raises(ValueError, match="chunk_size"):
        window_bounds(10, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk_size", [8, 17, 64])
def test_chunk_spans_tokenizer_exact_source_text(seed, chunk_size):
    text = words_text(random.Random(seed), 500)
    tokenizer = WordTokenizer()
    tokens = tokenizer.tokenize(text)
    spans = chunk_spans(text, tokenizer, chunk_size)
    assert [n for _, _, n in spans] == [e - s for s, e in window_bounds(len(tokens), chunk_size)]
    for (start, end, _), (token_start, token_end) in zip(
        spans, window_bounds(len(tokens), chunk_size), strict=True
    ):
        assert text[start:end] == tokenizer.detokenize(tokens[token_start:token_end])
    assert spans[0][0] == 0 and spans[-1][1] == len(text)


def test_chunk_spans_short_text_is_one_chunk():
    tokenizer = WordTokenizer()
    assert chunk_spans("just a few words", tokenizer, 1024) == [(0, 16, 4)]
    assert chunk_spans("  just a few words  ", None, 1024) == [(2, 18, 4)]


def test_chunk_spans_words_without_tokenizer():
    text = " ".join(f"w{i}" for i in range(100))
    spans = chunk_spans(text, None, 16)
    chunks = [text[s:e].split() for s, e, _ in spans]
    assert chunks[0] == [f"w{i}" for i in range(16)]
    assert chunks[1][:2] == ["w14", "w15"]  # 16 // 8 = 2 words shared
    assert chunks[-1][-1] == "w99"


class LowercasingTokenizer(WordTokenizer):
    def tokenize(self, text: str) -> list[int]:
        return super().tokenize(text.lower())


def test_chunk_spans_lossy_tokenizer_still_covers_text():
    text = words_text(random.Random(5), 300).upper()
    spans = chunk_spans(text, LowercasingTokenizer(), 32)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(s2 < e1 for (_, e1, _), (s2, _, _) in zip(spans, spans[1:], strict=False))


@pytest.mark.parametrize("use_tokenizer", [True, False])
@pytest.mark.parametrize(("segment_chars", "chunk_size"), [(120, 8), (500, 16), (50, 64), (3000, 24)])
def test_streamed_chunks_match_whole_text_chunks(monkeypatch, use_tokenizer, segment_chars, chunk_size):
    """Segments with a carried last window give exactly the windows of the text taken whole."""
    text = words_text(random.Random(segment_chars), 900)
    tokenizer = WordTokenizer() if use_tokenizer else None
    expected = [(s, text[s:e]) for s, e, _ in chunk_spans(text, tokenizer, chunk_size)]
    monkeypatch.setattr(dataset_chunks, "_SEGMENT_CHARS", segment_chars)
    rng = random.Random(7)
    pieces, at = [], 0
    while at < len(text):
        step = rng.randint(1, 97)
        pieces.append(text[at:at + step])
        at += step
    streamed = [
        (start, chunk) for start, chunk, _, _ in dataset_chunks._chunk_stream(pieces, tokenizer, chunk_size)
    ]
    assert streamed == [(s + len(c) - len(c.lstrip()), c.strip()) for s, c in expected]


def test_unbroken_text_longer_than_a_segment(monkeypatch):
    monkeypatch.setattr(dataset_chunks, "_SEGMENT_CHARS", 64)
    text = "x" * 1000 + " tail"
    chunks = [chunk for _, chunk, _, _ in dataset_chunks._chunk_stream([text], None, 8)]
    assert chunks == ["x" * 1000 + " tail"]


# ----------------------------------------------------------------------------- text files

@pytest.mark.parametrize(("name", "fmt"), [("notes.txt", "text"), ("README.md", "markdown")])
def test_text_file_chunks_are_exact_slices(tmp_path, name, fmt):
    text = words_text(random.Random(3), 2000)
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    records = list(iter_dataset(path, WordTokenizer(), chunk_size=64))
    assert len(records) == len(window_bounds(len(WordTokenizer().tokenize(text)), 64))
    for index, record in enumerate(records):
        meta = record["metadata"]
        assert meta["format"] == fmt and meta["source"] == name and meta["record"] == index
        assert text[meta["char_start"]:meta["char_end"]] == record["text"]
        assert record["id"] == blake(record["text"])
        assert meta["tokens"] <= 64
    assert records[0]["metadata"]["char_start"] == 0
    assert records[-1]["metadata"]["char_end"] == len(text.rstrip())


def test_text_file_without_tokenizer_uses_words(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text(" ".join(f"word{i}" for i in range(50)), encoding="utf-8")
    records = list(iter_dataset(path, None, chunk_size=16, source="corpus/plain"))
    assert [r["metadata"]["tokens"] for r in records] == [16, 16, 16, 8]
    assert records[0]["metadata"]["source"] == "corpus/plain"


# ----------------------------------------------------------------------------- JSONL

def test_jsonl_malformed_lines_reported_and_skipped(tmp_path, caplog):
    path = tmp_path / "chat.jsonl"
    write_jsonl(path, [
        json.dumps({"conversations": [{"from": "human", "value": "one"}]}),
        '{"text": "broken',
        "[1, 2]",
        "",
        json.dumps({"meta": "no text here"}),
        json.dumps({"text": "five"}),
    ])
    errors: list[DatasetIssue] = []
    records = list(iter_dataset(path, errors=errors))
    assert [r["text"] for r in records] == ["human: one", "five"]
    assert [r["metadata"]["record"] for r in records] == [1, 6]
    assert [(e.kind, e.number) for e in errors] == [("line", 2), ("line", 3), ("line", 5)]
    assert "invalid JSON" in errors[0].message and "list" in errors[1].message and "meta" in errors[2].message
    assert str(errors[0]).startswith(f"{path}: line 2: ")
    assert sum("skipped record" in message for message in caplog.messages) == 3


def test_jsonl_invalid_utf8_names_byte_offset(tmp_path):
    first = json.dumps({"text": "fine"}).encode() + b"\n"
    path = tmp_path / "bad.jsonl"
    path.write_bytes(first + b'{"text": "caf\xc3"}\n')
    with pytest.raises(DatasetError, match=rf"bad.jsonl: invalid UTF-8 at byte offset {len(first) + 13}"):
        list(iter_dataset(path))


def test_jsonl_with_bom(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"text": "a"}\n{"text": "b"}\n')
    assert [r["text"] for r in iter_dataset(path)] == ["a", "b"]


# ----------------------------------------------------------------------------- JSON

def random_record(rng: random.Random, index: int) -> dict:
    text = "".join(rng.choice("abc xyz é日\n\"\\{}[],") for _ in range(rng.randint(1, 300)))
    record = {"text": f"{index}: {text}", "nested": {"list": [1, 2.5, None, True, "]"] * rng.randint(0, 3)}}
    if rng.random() < 0.3:
        record = {"messages": [{"role": "user", "content": [{"type": "text", "text": record["text"]}]}]}
    return record


@pytest.mark.parametrize("block_bytes", [1, 7, 64, 4096])
@pytest.mark.parametrize("indent", [None, 2])
def test_json_array_streams_like_json_load(tmp_path, monkeypatch, block_bytes, indent):
    rng = random.Random(block_bytes)
    items = [random_record(rng, i) for i in range(60)]
    path = tmp_path / "list.json"
    path.write_text(json.dumps(items, indent=indent, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(dataset_readers, "_BLOCK_BYTES", block_bytes)
    records = list(iter_dataset(path))
    assert [r["text"] for r in records] == [
        extract_text(item) for item in json.loads(path.read_text("utf-8"))
    ]
    assert [r["metadata"]["record"] for r in records] == list(range(60))


@pytest.mark.parametrize("content", ["[]", " [ ] ", "[\n]"])
def test_json_empty_list(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(content)
    assert list(iter_dataset(path)) == []


def test_json_list_non_object_items_reported(tmp_path):
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([{"text": "a"}, "bare string", {"text": ""}, {"text": "d"}]))
    errors: list[DatasetIssue] = []
    assert [r["text"] for r in iter_dataset(path, errors=errors)] == ["a", "d"]
    assert [(e.kind, e.number) for e in errors] == [("item", 1), ("item", 2)]


@pytest.mark.parametrize(("content", "message"), [
    ('[{"text": "a"},\n {"text": "b"\n', "line 3"),
    ('[{"text": "a"} {"text": "b"}]', "expected ',' or ']'"),
    ('[{"text": "a"}] trailing', "unexpected data after"),
    ('[{"text": "a"},\n\n {"text": bad}]', "line 3"),
])
def test_json_broken_array_is_fatal(tmp_path, monkeypatch, content, message):
    monkeypatch.setattr(dataset_readers, "_BLOCK_BYTES", 5)
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(DatasetError, match=re.escape(message)):
        list(iter_dataset(path, format="json"))


def test_json_object_with_record_list_and_single_record(tmp_path):
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"version": 2, "data": [{"text": "one"}, {"output": "two"}]}, indent=1))
    assert [r["text"] for r in iter_dataset(wrapped)] == ["one", "two"]
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"conversations": [{"from": "human", "value": "hey"}]}, indent=1))
    assert [r["text"] for r in iter_dataset(single)] == ["human: hey"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"unusual": [{"content": "x"}]}))
    assert [r["text"] for r in iter_dataset(other)] == ["x"]


def test_json_object_without_records_raises(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text('{"name": "x", "count": 3}')
    with pytest.raises(DatasetError, match="no text and no list of records"):
        list(iter_dataset(path))


# ----------------------------------------------------------------------------- parquet

def write_parquet(path, rows: list[dict], row_group_size: int = 4) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)


def test_parquet_rows_across_row_groups(tmp_path):
    rows = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}],
             "score": float(i)} for i in range(10)]
    rows[3]["conversations"] = []
    path = tmp_path / "chat.parquet"
    write_parquet(path, rows)
    assert pq.ParquetFile(path).num_row_groups == 3
    errors: list[DatasetIssue] = []
    records = list(iter_dataset(path, errors=errors))
    assert [r["text"] for r in records] == [f"human: q{i}\ngpt: a{i}" for i in range(10) if i != 3]
    assert [r["metadata"]["record"] for r in records] == [i for i in range(10) if i != 3]
    assert [(e.kind, e.number) for e in errors] == [("row", 3)]


def test_parquet_without_text_column(tmp_path):
    path = tmp_path / "numbers.parquet"
    write_parquet(path, [{"a": 1, "b": 2.0}])
    with pytest.raises(DatasetError, match="no text column.*a, b"):
        list(iter_dataset(path))


@pytest.mark.parametrize("keep", [0.2, 0.6, 0.95])
def test_truncated_parquet_raises(tmp_path, keep):
    whole = tmp_path / "whole.parquet"
    write_parquet(whole, [{"text": f"row {i} " * 20} for i in range(200)], row_group_size=50)
    data = whole.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(DatasetError, match="cut.parquet: truncated parquet"):
        list(iter_dataset(cut))
    with pytest.raises(DatasetError, match="truncated parquet"):
        sniff_format(data[: int(len(data) * keep)], "upload.parquet")
    assert sniff_format(data, "upload.parquet") == "parquet"


# ----------------------------------------------------------------------------- HTML / XML

HTML = """<!DOCTYPE html><html><head><title>Tea &amp; Biscuits</title>
<style>body { color: red; }</style><script>var x = "<p>not text</p>";</script></head>
<body><h1>Brewing</h1><p>Water at 95&nbsp;&deg;C &mdash; then <b>steep</b>   for
three&#32;minutes.</p><ul><li>Milk&lt;optional&gt;</li><li>Sugar</li></ul>
<noscript>Enable JS</noscript><!-- a comment --></body></html>"""


def test_html_readable_text(tmp_path):
    path = tmp_path / "tea.html"
    path.write_text(HTML, encoding="utf-8")
    records = list(iter_dataset(path))
    assert len(records) == 1
    text = records[0]["text"]
    assert text == ("Tea & Biscuits\nBrewing\nWater at 95 °C — then steep for three minutes.\n"
                    "Milk<optional>\nSugar\nEnable JS")
    assert "color" not in text and "var x" not in text and "comment" not in text


def test_xml_readable_text(tmp_path):
    path = tmp_path / "dict.xml"
    path.write_text("""<?xml version="1.0" encoding="UTF-8"?>
<dictionary><entry id="1"><word>cat</word><def>a small <i>domesticated</i> feline &amp; pet</def></entry>
<entry><word>dog</word><def><![CDATA[a <loyal> canine]]></def></entry></dictionary>""", encoding="utf-8")
    (record,) = iter_dataset(path)
    assert record["text"] == "cat\na small domesticated feline & pet\ndog\na <loyal> canine"


def test_xml_malformed_and_entity_declarations(tmp_path):
    broken = tmp_path / "broken.xml"
    broken.write_text("<?xml version='1.0'?>\n<a><b>text</a>")
    with pytest.raises(DatasetError, match=r"broken.xml: invalid XML at line 2"):
        list(iter_dataset(broken))
    bomb = tmp_path / "bomb.xml"
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><x>&b;</x>')
    with pytest.raises(DatasetError, match="entity declarations are not allowed"):
        list(iter_dataset(bomb))


# ----------------------------------------------------------------------------- bad files

def test_binary_file_raises(tmp_path):
    path = tmp_path / "image.txt"
    path.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    with pytest.raises(DatasetError, match="image.txt: (binary data|invalid UTF-8)"):
        list(iter_dataset(path))


def test_bad_utf8_after_the_sniffed_head_names_offset(tmp_path):
    prefix = ("plain ascii text " * 10000).encode()
    path = tmp_path / "late.txt"
    path.write_bytes(prefix + b"\xff more")
    with pytest.raises(DatasetError, match=rf"late.txt: invalid UTF-8 at byte offset {len(prefix)}"):
        list(iter_dataset(path))


def test_nul_after_the_head_raises(tmp_path):
    path = tmp_path / "late.md"
    path.write_bytes(b"# title\n" * 20000 + b"\x00")
    with pytest.raises(DatasetError, match=rf"NUL byte at byte offset {8 * 20000}"):
        list(iter_dataset(path))


# ----------------------------------------------------------------------------- sniffing

@pytest.mark.parametrize(("content", "filename", "expected"), [
    (b'{"text": "a"}\n{"text": "b"}\n', "data.json", "jsonl"),
    (b'{"text": "a"}\n', "data.jsonl", "jsonl"),
    (b'{"text": broken\n{"text": "b"}\n', "data.jsonl", "jsonl"),
    (b'{"text": broken\n{"text": "b"}\n', None, "jsonl"),
    (b'{"text": "a"}\n', "data.json", "json"),
    (b'[\n  {"text": "a"}\n]', "data.jsonl", "json"),
    (b'{\n  "data": []\n}', None, "json"),
    (b"[1] Introduction\nSome words.", "paper.txt", "text"),
    (b"# Title\n\ntext", "notes.md", "markdown"),
    (b"just words", None, "text"),
    (b"<html><body><p>x</p></body></html>", "page.txt", "html"),
    (b"<!doctype html><p>x", "page.xml", "html"),
    (b"<p>fragment</p>", "frag.html", "html"),
    (b"plain words in an html file", "frag.html", "html"),
    (b"<?xml version='1.0'?><a>x</a>", "data.txt", "xml"),
    (b"<root><a>x</a></root>", None, "xml"),
    (b"\xef\xbb\xbf[{\"text\": \"a\"}]", "bom.json", "json"),
])
def test_sniff_format_by_content(tmp_path, content, filename, expected):
    assert sniff_format(content, filename) == expected
    if filename:
        path = tmp_path / filename
        path.write_bytes(content)
        assert sniff_format(path) == expected


def test_sniff_large_pretty_json_head(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"text": "word " * 50, "i": i} for i in range(2000)], indent=2))
    assert path.stat().st_size > 2 * dataset_formats._SNIFF_BYTES
    assert sniff_format(path) == "json"
    assert sum(1 for _ in iter_dataset(path)) == 2000


@pytest.mark.parametrize(("content", "filename"), [
    (b"GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n", "GPL-3"),
    (b"Apache License\n   Version 2.0, January 2004\n", "Apache-2.0"),
])
def test_text_under_a_name_without_a_known_extension_is_text(content, filename, tmp_path):
    # Debian's common-licenses: no extension, or a version number where an extension would be.
    assert sniff_format(content, filename) == "text"
    path = tmp_path / filename
    path.write_bytes(content * 20)
    assert sniff_format(path) == "text"
    assert [record["text"] for record in iter_dataset(path)][0].startswith(content.decode().split("\n")[0])


@pytest.mark.parametrize(
    ("content", "filename", "message"),
    [
        (b"not json at all", "data.json", "content is not JSON"),
        (b'{"text": "a", }', "data.json", "not valid JSON"),
        (b"hello", "data.parquet", "not a parquet file"),
        (b"PAR1 but nothing else", "x.parquet", "truncated parquet"),
        (b"plain text", "data.xml", "content is not XML"),
        (  # a gzip header: images are read now (OCR), compressed archives other than ZIP are not
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
            "archive.gz",
            "unsupported file type '.gz', and the content is not plain text",
        ),
        (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "archive.txt", "binary data"),
        (b"caf\xe9 au lait", "latin1.txt", "invalid UTF-8 at byte offset 3"),
        (b"   \n\t ", "blank.txt", "file is empty"),
        (b"", "empty.jsonl", "file is empty"),
    ],
)
def test_sniff_format_rejects(content, filename, message):
    with pytest.raises(DatasetError, match=re.escape(message)) as raised:
        sniff_format(content, filename)
    assert filename in str(raised.value)


# ----------------------------------------------------------------------------- discovery and validation

def test_discover_datasets(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    (tmp_path / "sub" / "b.md").write_text("# B")
    (tmp_path / "sub" / "c.parquet").write_bytes(b"garbage")
    (tmp_path / ".hidden" / "d.txt").write_text("hidden")
    (tmp_path / "e.csv").write_text("a,b")  # a spreadsheet now (engine.readers.sheets)
    (tmp_path / "f.xls").write_text("an old binary workbook is no format of the portal")
    found = discover_datasets(tmp_path)
    assert [(entry["name"], entry["format"]) for entry in found] == [
        ("a.jsonl", "jsonl"), ("e.csv", "csv"), ("sub/b.md", "markdown"), ("sub/c.parquet", None)]
    assert found[0]["size"] == (tmp_path / "a.jsonl").stat().st_size
    assert found[0]["path"] == tmp_path / "a.jsonl"
    assert "not a parquet file" in found[3]["error"]
    with pytest.raises(DatasetError, match="not a directory"):
        discover_datasets(tmp_path / "a.jsonl")


def test_validate_dataset_summary(tmp_path):
    path = tmp_path / "upload.jsonl"
    write_jsonl(path, [json.dumps({"text": f"row {i}"}) if i % 10 else "{bad" for i in range(1, 501)])
    summary = validate_dataset(path, max_records_to_check=100)
    assert summary["format"] == "jsonl" and not summary["complete"]
    assert summary["records_checked"] == 100 and summary["records_valid"] == 90
    assert summary["issue_count"] == 10 and summary["issues"][0].endswith(
        "line 10: invalid JSON: Expecting property name enclosed in double quotes at column 2"
    )
    assert 250 <= summary["record_estimate"] <= 900
    full = validate_dataset(path, max_records_to_check=10_000)
    assert full["complete"] and full["record_estimate"] == 450 and full["records_valid"] == 450


def test_validate_dataset_parquet_estimate_is_row_count(tmp_path):
    path = tmp_path / "rows.parquet"
    write_parquet(path, [{"text": f"t{i}"} for i in range(300)], row_group_size=1000)
    assert validate_dataset(path, max_records_to_check=10)["record_estimate"] == 300


def test_validate_dataset_stops_early_on_a_file_of_bad_lines(tmp_path):
    path = tmp_path / "garbage.jsonl"
    write_jsonl(path, ['{"id": 1}'] * 5000)
    with pytest.raises(
        DatasetError, match="no readable records in the first 100 checked.*line 1: no text found"
    ):
        validate_dataset(path, max_records_to_check=100)


def test_validate_dataset_without_text_raises(tmp_path):
    path = tmp_path / "ids.jsonl"
    write_jsonl(path, ['{"id": 1}', '{"id": 2}'])
    with pytest.raises(DatasetError, match="no readable records.*line 1: no text found"):
        validate_dataset(path)


def test_jsonl_bad_first_line_is_an_issue_not_fatal(tmp_path):
    path = tmp_path / "first.jsonl"
    write_jsonl(path, ['{"text": broken', '{"text": "b"}', '{"text": "c"}'])
    errors: list[DatasetIssue] = []
    assert [r["text"] for r in iter_dataset(path, errors=errors)] == ["b", "c"]
    assert [(e.kind, e.number) for e in errors] == [("line", 1)]


def test_iter_dataset_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="format must be one of"):
        iter_dataset(tmp_path / "x.txt", format="xls")
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        iter_dataset(tmp_path / "x.txt", chunk_size=0)


# ----------------------------------------------------------------------------- the real tokenizer

@pytest.fixture(scope="module")
def gemma_tokenizer(gemma_gguf):
    from engine.tokenizer import GGUFTokenizer

    return GGUFTokenizer.from_gguf(gemma_gguf)


@pytest.mark.parametrize("chunk_size", [8, 64, 512])
def test_chunk_spans_gemma_tokenizer(gemma_tokenizer, chunk_size):
    """Real text with emoji and rare characters whose byte-fallback tokens windows may split."""
    import pydoc_data.topics

    rng = random.Random(chunk_size)
    words = pydoc_data.topics.topics["assignment"].split(" ")
    text = " ".join(word + rng.choice(["", "", "", " 🙂", "𓀀", " naïve", "日本語"]) for word in words[:1500])
    tokens = gemma_tokenizer.tokenize(text)
    bounds = window_bounds(len(tokens), chunk_size)
    spans = chunk_spans(text, gemma_tokenizer, chunk_size)
    assert [n for _, _, n in spans] == [end - start for start, end in bounds]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    split_chars = 0
    for (start, end, _), (token_start, token_end) in zip(spans, bounds, strict=True):
        decoded = gemma_tokenizer.detokenize(tokens[token_start:token_end])
        chunk = text[start:end]
        if chunk != decoded:
            # Only a character cut between byte tokens at either edge may differ, and it is kept whole.
            split_chars += 1
            assert decoded.strip("\ufffd") in chunk and len(chunk) - len(decoded.strip("\ufffd")) <= 2
    assert "\ufffd" not in text
    if chunk_size == 8:
        assert split_chars > 0  # the case above was really exercised


def test_text_file_with_gemma_tokenizer(tmp_path, gemma_tokenizer):
    import pydoc_data.topics

    text = "\n\n".join(pydoc_data.topics.topics[name] for name in ("assignment", "if", "while", "for"))
    path = tmp_path / "topics.md"
    path.write_text(text, encoding="utf-8")
    records = list(iter_dataset(path, gemma_tokenizer, chunk_size=256))
    assert len(records) == len(window_bounds(len(gemma_tokenizer.tokenize(text)), 256))
    for record in records:
        meta = record["metadata"]
        assert text[meta["char_start"]:meta["char_end"]] == record["text"]
        assert gemma_tokenizer.count_tokens(record["text"]) <= 256 + 2


def test_long_structured_record_is_cut_into_windows(tmp_path, gemma_tokenizer):
    # A record longer than one window becomes one document per window (a memory longer than the
    # chat's token budget could never be given to the model); a short one stays whole.
    import pydoc_data.topics

    long_text = pydoc_data.topics.topics["for"] + "\n\n" + pydoc_data.topics.topics["while"]
    path = tmp_path / "records.jsonl"
    write_jsonl(path, [json.dumps({"text": "A short record stays whole."}), json.dumps({"text": long_text}),
                       json.dumps({"title": "t", "text": "Another short one."})])
    records = list(iter_dataset(path, gemma_tokenizer, chunk_size=128))
    short = [r for r in records if r["metadata"]["record"] in (1, 3)]
    assert [r["text"] for r in short] == ["A short record stays whole.", "Another short one."]
    assert all("part" not in r["metadata"] for r in short)
    parts = [r for r in records if r["metadata"]["record"] == 2]
    n_tokens = len(gemma_tokenizer.tokenize(long_text))
    assert len(parts) == len(window_bounds(n_tokens, 128)) > 2
    assert [r["metadata"]["part"] for r in parts] == list(range(len(parts)))
    for record in parts:
        meta = record["metadata"]
        assert long_text[meta["char_start"]:meta["char_end"]] == record["text"]
        assert gemma_tokenizer.count_tokens(record["text"]) <= 128 + 2
        assert record["id"] == content_id(record["text"])
    assert parts[0]["metadata"]["char_start"] == 0 and parts[-1]["metadata"]["char_end"] >= len(
        long_text.rstrip()
    )
    # Without a tokenizer, whitespace words stand in for tokens, as for text files.
    words = list(iter_dataset(path, None, chunk_size=128))
    assert len([r for r in words if r["metadata"]["record"] == 2]) == len(
        window_bounds(len(long_text.split()), 128)
    )
