"""Each corpus setting declared once: its name, type, range, default, help text, and whether a
change waits for the next build.

Everything else derives from `SETTINGS`: the model's columns (`model_field`), the settings form's
fields (`form_field`), the API's fields (`api.serializers`), a build's recorded parameters
(`corpus.services.builds.corpus_parameters`), the settings page's "applies at the next build", and
the checks of the one service that changes them (`corpus.services.corpora.corpus_update`), which
the page and the API both call. Integer ranges are the engine's (`engine.config.CONFIG_BOUNDS`),
narrowed where the portal stores less: the engine may not import the portal, so the declaration
names the engine's bounds, never the other way.

Adding a setting: declare it here, then `manage.py makemigrations` for its column (the model's
field is `model_field(name)`); a build reads it when `rebuild` is set and `BuildParameters` or the
engine names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from engine.config import CONFIG_BOUNDS, Bounds, Config
from engine.gguf import GGUFError, read_metadata
from engine.tokenizer import index_tokenizer_refusal

_ENGINE = Config()
_INT32_MAX = 2 ** 31 - 1  # a PositiveIntegerField's largest value on every database Django supports


@dataclass(frozen=True)
class CorpusSetting:
    """One setting of a corpus. `rebuild`: a change applies at the next build (a build records
    it); otherwise at once. `check` returns why a value is refused, or None."""

    name: str
    label: str
    kind: type  # int, bool or str
    default: Any
    help_text: str
    rebuild: bool
    bounds: Bounds | None = None  # int settings
    max_length: int | None = None  # str settings
    staff_only: bool = False  # a value that names something on the server
    check: Callable[[Any], str | None] | None = None

    def cleaned(self, value: Any) -> Any:
        """`value` as stored: a text without its surrounding blanks."""
        return value.strip() if self.kind is str and isinstance(value, str) else value

    def refusal(self, value: Any) -> str | None:
        """Why `value` cannot be this setting, or None."""
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            return "Enter a whole number."
        if self.kind is bool and not isinstance(value, bool):
            return "Enter true or false."
        if self.kind is str and not isinstance(value, str):
            return "Enter a text."
        if self.bounds is not None and not self.bounds.allows(value):
            return f"Must be {self.bounds.wording}."
        if self.max_length is not None and len(value) > self.max_length:
            return f"At most {self.max_length} characters."
        return self.check(value) if self.check is not None else None

    def model_field(self) -> models.Field:
        """The model's column: the smallest positive integer column that holds the range."""
        if self.kind is bool:
            return models.BooleanField(self.label, default=self.default, help_text=self.help_text)
        if self.kind is str:
            # No `default`: a text column's is already "" (the only default a text setting has).
            return models.CharField(self.label, max_length=self.max_length, blank=True,
                                    help_text=self.help_text)
        small = self.bounds.high <= 32767
        column = models.PositiveSmallIntegerField if small else models.PositiveIntegerField
        return column(self.label, default=self.default, help_text=self.help_text,
                      validators=[MinValueValidator(self.bounds.low), MaxValueValidator(self.bounds.high)])

    def form_field(self) -> forms.Field:
        """The settings form's field; an int's range is also the browser's (`min`, `max`)."""
        common = {"label": self.label, "help_text": self.help_text, "initial": self.default}
        if self.kind is bool:
            return forms.BooleanField(required=False, **common)
        if self.kind is str:
            return forms.CharField(required=False, max_length=self.max_length, **common)
        return forms.IntegerField(min_value=self.bounds.low, max_value=self.bounds.high, **common)


def gguf_refusal(path: str) -> str | None:
    """Why the index cannot be built on the GGUF model at `path` (blank: the default model)."""
    if not path.strip():
        return None
    try:
        metadata = read_metadata(path.strip())
    except (GGUFError, OSError, ValueError) as error:
        return f"Not a readable GGUF model: {error}"
    return index_tokenizer_refusal(metadata.tokenizer_model)


SETTINGS: tuple[CorpusSetting, ...] = (
    CorpusSetting(
        "hdc_dimensions", "HDC dimensions", int, _ENGINE.hdc_dimensions,
        "Length of each memory's hypervector (64 to 65,536); more separates memories better.", rebuild=True,
        bounds=CONFIG_BOUNDS["hdc_dimensions"].narrowed(high=65536)),
    # >= 1 where the engine takes 0: the column has refused 0 since migration 0006.
    CorpusSetting(
        "hdc_seed", "Random seed", int, _ENGINE.hdc_seed,
        "Seeds the random projection; the same seed gives the same index.", rebuild=True,
        bounds=CONFIG_BOUNDS["hdc_seed"].narrowed(low=1, high=_INT32_MAX)),
    CorpusSetting(
        "hdc_ngram", "N-gram length", int, _ENGINE.hdc_ngram,
        "Neighbouring tokens bound together (1 to 16).", rebuild=True, bounds=CONFIG_BOUNDS["hdc_ngram"]),
    CorpusSetting(
        "chunk_size", "Chunk size (tokens)", int, _ENGINE.chunk_size,
        "Tokens per memory: longer texts, pages and records are cut into windows of this size.", rebuild=True,
        bounds=CONFIG_BOUNDS["chunk_size"].narrowed(high=32768)),
    CorpusSetting(
        "gguf_path", "GGUF model path", str, "",
        "GGUF model whose token embeddings seed the index; blank: the default model.", rebuild=True,
        max_length=500, staff_only=True, check=gguf_refusal),
    CorpusSetting(
        "late_interaction", "Late interaction", bool, False,
        "Also fill the corpus's text collection with each memory's token multi-vector at build time, "
        "so searches fuse HDC with late interaction. Costs up to ~0.5 MB per memory in Chroma.",
        rebuild=True),
    CorpusSetting(
        "meaning_channel", "Meaning channel", bool, True,
        "Also read each memory with a small sentence encoder (all-MiniLM-L6-v2), so a question worded "
        "unlike the text still finds it. In the background after a build: the corpus is searchable by "
        "HDC and words at once, by meaning as its segments are read (tens of memories a second).",
        rebuild=True),
    CorpusSetting(
        "ocr", "OCR of images and scans", bool, True,
        "Read images (PNG, JPEG, TIFF, WebP) and PDF pages without a text layer with an OCR model "
        "(RapidOCR, on the CPU); off: they are refused with that reason. Slow: about 25 CPU seconds a "
        "scanned A4 page (over a minute on busy cores), in the build: an upload only checks that the "
        "images and pages open. Pages with text cost nothing more.",
        rebuild=True),
    CorpusSetting(
        "append_on_upload", "Index uploads at once", bool, True,
        "A successful upload queues an append that makes the new files searchable within seconds, "
        "without a full build (not for late-interaction corpora, which need a build).", rebuild=False),
)


def settings_declared() -> tuple[CorpusSetting, ...]:
    """The declared settings, in the order pages show them (read at call time, so every surface
    sees the same list)."""
    return SETTINGS


def setting_named(name: str) -> CorpusSetting:
    for setting in settings_declared():
        if setting.name == name:
            return setting
    raise KeyError(name)


def model_field(name: str) -> models.Field:
    """The column of the setting `name`, for `corpus.models.Corpus`."""
    return setting_named(name).model_field()


def settings_refusals(values: Mapping[str, Any], *, changed: set[str]) -> dict[str, list[str]]:
    """Why the settings `values` (every setting of one corpus) cannot be saved, by field: each
    changed value's own check (an unchanged one was accepted once: a model file since removed must
    not block changing the description), then the rules between settings. Empty when they can."""
    refusals = {s.name: [why] for s in settings_declared()
                if s.name in changed and (why := s.refusal(values[s.name])) is not None}
    if values.get("meaning_channel") and values.get("late_interaction"):
        # Not a setting's own check: which of the two the owner gives up is his choice.
        refusals.setdefault("meaning_channel", []).append(
            "The meaning channel (on by default) ranks after the exact-word channel, which a "
            "late-interaction corpus does not have: choose one of the two.")
    return refusals
