"""The API's orjson renderer writes what DRF's JSONRenderer wrote (it replaced it for speed)."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import numpy as np
from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from api.renderers import FastJSONRenderer

PAYLOAD = {
    "count": 2, "next": None, "score": 0.1, "small": 1e-05, "big": 12345678901234, "flag": True,
    "lazy": gettext_lazy("This field is required."),
    "when": datetime.datetime(2026, 11, 24, 1, 2, 3, 456789, tzinfo=datetime.UTC),
    "day": datetime.date(2026, 11, 24), "amount": decimal.Decimal("1.50"), "uid": uuid.UUID(int=7),
    "numpy": [np.float32(0.1), np.int64(3), np.arange(3)], "int_keys": {1: "a", 2: "b"},
    "separator": "line\u2028para\u2029end", "unicode": "naïve – 東京",
    "nested": ReturnList([ReturnDict({"a": (1, 2)}, serializer=None)], serializer=None),
}


def test_the_output_decodes_to_what_drf_wrote_and_keeps_its_formats():
    fast, drf = FastJSONRenderer().render(PAYLOAD), JSONRenderer().render(PAYLOAD)
    assert json.loads(fast) == json.loads(drf)
    decoded = json.loads(fast)
    assert decoded["when"] == "2026-11-24T01:02:03.456789Z" and decoded["amount"] == 1.5
    assert decoded["numpy"][0] == float(np.float32(0.1))  # DRF's tolist(): the float32's exact value
    assert b"\\u2028" in fast and b"\\u2029" in fast and "\u2028".encode() not in fast
    assert "東京".encode() in fast  # UTF-8, not \\u escapes (UNICODE_JSON)
    assert b": " not in fast and b", " not in fast  # compact


def test_none_renders_an_empty_body_and_an_indent_request_is_honoured():
    assert FastJSONRenderer().render(None) == b""
    indented = FastJSONRenderer().render({"a": [1]}, "application/json; indent=2")
    assert indented == JSONRenderer().render({"a": [1]}, "application/json; indent=2") and b"\n  " in indented


def test_an_integer_beyond_64_bits_is_written_as_drf_writes_it():
    # Seen by the schema test: a request's own huge id echoed in its 400 made orjson fail with a 500.
    data = {"corpora": ["Invalid pk \"63903456663299110958268416\"."], "value": 63903456663299110958268416}
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)
    assert json.loads(FastJSONRenderer().render(data))["value"] == 63903456663299110958268416
