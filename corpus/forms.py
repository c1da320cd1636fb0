from __future__ import annotations

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator

from accounts.services.groups import groups_shareable_by
from corpus.models import Corpus
from corpus.services.builds import MEANING_BYTES_PER_MEMORY, meaning_rate
from corpus.templatetags.portal import seconds
from engine.gguf import GGUFError, read_metadata
from engine.tokenizer import index_tokenizer_refusal

NUMBER_FIELDS = ("hdc_dimensions", "hdc_seed", "hdc_ngram", "chunk_size")


def meaning_cost(corpus: Corpus | None) -> str:
    """What turning the meaning channel on costs `corpus` (its active build's memories; per 1,000
    for a corpus not built yet), in words for the settings form."""
    rate, measured = meaning_rate()
    how = "as measured by the last build that read one here" if measured else "estimated for two cores"
    memories = corpus.active_build.documents if corpus is not None and corpus.active_build_id else 0
    if memories:
        return (f"For this corpus's {memories:,} memories: about {seconds(memories / rate)} more per build at "
                f"{rate:,.0f} memories/s ({how}), and {memories * MEANING_BYTES_PER_MEMORY / 1e6:,.1f} MB more.")
    return (f"About {seconds(1000 / rate)} more of build per 1,000 memories at {rate:,.0f} memories/s ({how}), "
            f"and {MEANING_BYTES_PER_MEMORY} bytes a memory.")


class CorpusForm(forms.ModelForm):
    """Create/edit a corpus. The model path is a path on the server, so only staff may set it."""

    class Meta:
        model = Corpus
        fields = ["name", "description", "visibility", "readable_groups", "writable_groups", "hdc_dimensions",
                  "hdc_seed", "hdc_ngram", "chunk_size", "gguf_path", "late_interaction", "meaning_channel",
                  "append_on_upload"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3}),
                   "readable_groups": forms.CheckboxSelectMultiple, "writable_groups": forms.CheckboxSelectMultiple}

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        groups = groups_shareable_by(user)
        if groups.exists():
            self.fields["readable_groups"].queryset = groups
            self.fields["writable_groups"].queryset = groups
            self.fields["readable_groups"].help_text = ("May search and view when shared. "
                                                        "Share with people on the corpus page.")
        else:
            # In no group: nothing to pick (a label with no boxes); the corpus page shares with people.
            del self.fields["readable_groups"], self.fields["writable_groups"]
        # The browser refuses what the model's validators would (0 dimensions, a 0-gram) before a round trip.
        for name, field in self.fields.items():
            for validator in Corpus._meta.get_field(name).validators if name in NUMBER_FIELDS else ():
                if isinstance(validator, MinValueValidator):
                    field.min_value = validator.limit_value
                    field.widget.attrs["min"] = validator.limit_value
                elif isinstance(validator, MaxValueValidator):
                    field.max_value = validator.limit_value
                    field.widget.attrs["max"] = validator.limit_value
        if not user.is_staff:
            del self.fields["gguf_path"]
        # What the option costs, measured where it can be, before the owner turns it on.
        self.fields["meaning_channel"].help_text = (f"{Corpus._meta.get_field('meaning_channel').help_text} "
                                                    f"{meaning_cost(self.instance if self.instance.pk else None)}")

    def clean(self) -> dict:
        data = super().clean()
        if data.get("meaning_channel") and data.get("late_interaction"):
            self.add_error("meaning_channel", "The meaning channel ranks after the exact-word channel, which a "
                                              "late-interaction corpus does not have: choose one of the two.")
        return data

    def clean_gguf_path(self) -> str:
        path = self.cleaned_data.get("gguf_path", "").strip()
        if path:
            try:
                metadata = read_metadata(path)
            except (GGUFError, OSError) as error:
                raise forms.ValidationError(f"Not a readable GGUF model: {error}") from None
            refusal = index_tokenizer_refusal(metadata.tokenizer_model)
            if refusal:
                raise forms.ValidationError(refusal)
        return path


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's documented pattern); cleans to a list."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"multiple": True, "class": "visually-hidden"}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None) -> list:
        single = super().clean
        if isinstance(data, (list, tuple)) and data:
            return [single(item, initial) for item in data]
        return [single(data or None, initial)]


class DatasetUploadForm(forms.Form):
    file = MultipleFileField(
        label="Files", help_text="PDF, Word (DOCX), Markdown, text, HTML, XML, JSON, JSONL or Parquet (UTF-8 text), "
                                 "or a ZIP of such files. Several at once; drop a folder to upload all its files.")

    def __init__(self, *args, upload_errors: dict | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.upload_errors = upload_errors or {}

    def clean(self) -> dict:
        if "file" in self.upload_errors:
            self.errors.pop("file", None)
            raise forms.ValidationError(self.upload_errors["file"])
        return super().clean()
