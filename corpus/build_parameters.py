"""What an index build records about itself: `IndexBuild.parameters`, read and written as one type.

The row keeps plain JSON (`to_json`, with a `version` key); `BuildParameters.from_json` reads every
shape a row may hold: rows written before the version existed carry no `version` and lack the keys
added since (a missing key reads as its field's default, e.g. `dataset_ids` None: "not recorded").
Keys this version does not know are kept in `extra` and written back, so a row read and written
again loses nothing.

Who writes what: a full build's row starts as the corpus's snapshot (`hdc_*`, `chunk_size`,
`gguf_path`, `late_interaction`, `meaning_channel`), gains `dataset_ids`, the model's identity
(`model_name`, `model_sha256`), its fusion evidence (`fusion` for late interaction with
`text_records` and `text_rows_skipped`; else `word_fusion`, and `meaning_fusion` with the meaning
channel), `skipped_documents` (what it skipped, and why) and `published` when it runs. An append's
row copies the state's HDC settings and model, and records the state it was queued on (`base_build`,
`previous`), whether to write an exact-word index (`word_channel`) and meaning rows
(`meaning_channel`), then its `segment`, `skipped_documents` and `published`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.fusion import FusionChoice

VERSION = 1
# An append copies these from the state's base build: its segment must be encoded the same way.
INHERITED_BY_APPENDS = ("hdc_dimensions", "hdc_seed", "hdc_ngram", "hdc_drop_components", "chunk_size",
                        "gguf_path", "model_name", "model_sha256", "late_interaction", "ocr")
_FUSIONS = ("fusion", "word_fusion", "meaning_fusion")
_ID_LISTS = ("dataset_ids", "previous")


@dataclass(frozen=True)
class BuildParameters:
    """`IndexBuild.parameters` as a value. None: the row does not record it (an older build, or a
    field that does not apply to its kind)."""

    hdc_dimensions: int | None = None
    hdc_seed: int | None = None
    hdc_ngram: int | None = None
    hdc_drop_components: int | None = None  # None: the engine's default when the build ran
    chunk_size: int | None = None
    gguf_path: str = ""  # the model's path on the machine that recorded it
    model_name: str | None = None  # the model's identity, by which every machine finds its own copy
    model_sha256: str | None = None
    late_interaction: bool = False
    ocr: bool = True  # images and text-less PDF pages read by OCR (`engine.ocr`); older builds: on
    dataset_ids: tuple[int, ...] | None = None  # the datasets the build or segment holds
    base_build: int | None = None  # an append: the state it was queued on, base build first
    previous: tuple[int, ...] = ()
    word_channel: bool = False  # an append: write an exact-word index (its base build has one)
    meaning_channel: bool = False  # encode each memory by meaning (`engine.meaning`): the corpus's
    # choice for a full build; an append: its base build has the channel
    text_records: int | None = None  # late interaction: records filled, rows that had no text
    text_rows_skipped: int | None = None
    fusion: FusionChoice | None = None  # late interaction's fusion rule, measured on the build
    word_fusion: FusionChoice | None = None  # the exact-word channel's rule (None: no channel)
    meaning_fusion: FusionChoice | None = None  # the meaning channel's rule (None: no channel)
    segment: dict[str, Any] | None = None  # an append: its manifest's segment (`engine.segments`)
    published: dict[str, dict[str, Any]] | None = None  # {file: {"bytes", "sha256"}} in the object store
    # Documents the build read and skipped, refused part way through (a late sheet over the row cap, the
    # time cap, a scan on which OCR found no text): (dataset name, reason); None: none skipped.
    skipped_documents: tuple[tuple[str, str], ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> BuildParameters:
        """Any stored shape (None or {} included); a key of a known field with the wrong type is a
        ValueError naming it."""
        value = dict(value or {})
        value.pop("version", None)
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        for name in known & value.keys():
            kwargs[name] = _read(name, value.pop(name))
        return cls(**kwargs, extra=value)

    def to_json(self) -> dict[str, Any]:
        """The row's JSON: the known fields that are set, the kept unknown keys and `version`."""
        out: dict[str, Any] = dict(self.extra)
        for name in (f.name for f in fields(self) if f.name != "extra"):
            value = getattr(self, name)
            if value is None:
                continue
            if name == "skipped_documents":
                value = [{"name": document, "reason": reason} for document, reason in value]
            out[name] = value.to_dict() if name in _FUSIONS else list(value) if name in _ID_LISTS else value
        out["version"] = VERSION
        return out

    def replace(self, **changes: Any) -> BuildParameters:
        return replace(self, **changes)

    @property
    def model_key(self) -> str:
        """The model by identity where the build recorded it, else by its path: two builds whose
        keys differ were encoded with different models."""
        return self.model_sha256 or self.gguf_path

    def for_append(self, *, dataset_ids: list[int], base_build: int, previous: list[int]) -> BuildParameters:
        """An append's parameters on a state whose base build recorded these."""
        inherited = {name: getattr(self, name) for name in INHERITED_BY_APPENDS}
        return BuildParameters(**inherited, dataset_ids=tuple(dataset_ids), base_build=base_build,
                               previous=tuple(previous), word_channel=self.word_fusion is not None,
                               meaning_channel=self.meaning_fusion is not None)


def _read(name: str, value: Any) -> Any:
    """One stored value as its field's type (JSON has no tuples and no FusionChoice)."""
    if value is None:
        return BuildParameters.__dataclass_fields__[name].default  # a stored null: as if absent
    try:
        if name in _FUSIONS:
            return FusionChoice.from_dict(value)
        if name in _ID_LISTS:
            return tuple(int(i) for i in value)
        if name == "skipped_documents":
            return tuple((str(item["name"]), str(item["reason"])) for item in value)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise ValueError(f"build parameters: {name}={value!r} cannot be read ({error})") from None
    return value
