from __future__ import annotations

from django import forms

from accounts.services.groups import groups_shareable_by
from corpus.corpus_settings import settings_declared
from corpus.models import Corpus
from corpus.services.builds import MEANING_BYTES_PER_MEMORY, meaning_rate
from corpus.templatetags.portal import seconds


def meaning_cost(corpus: Corpus | None) -> str:
    """What the meaning channel costs `corpus` (its active build's memories; per 1,000 for a corpus
    not built yet: the encoder's time after each build, in the background), in words for the form."""
    rate, measured = meaning_rate()
    how = "as measured by the last segment read here" if measured else "estimated for two cores"
    memories = corpus.active_build.documents if corpus is not None and corpus.active_build_id else 0
    if memories:
        return (f"For this corpus's {memories:,} memories: about {seconds(memories / rate)} of reading in "
                f"the background after each build at {rate:,.0f} memories/s ({how}), and "
                f"{memories * MEANING_BYTES_PER_MEMORY / 1e6:,.1f} MB more.")
    return (f"About {seconds(1000 / rate)} of reading in the background per 1,000 memories at "
            f"{rate:,.0f} memories/s ({how}), and {MEANING_BYTES_PER_MEMORY} bytes a memory.")


class CorpusForm(forms.ModelForm):
    """Create/edit a corpus: its name, description and sharing, then each declared setting
    (corpus.corpus_settings). The view saves through the service, whose checks are the settings'.
    A staff-only setting names something on the server (the model path), so only staff see it."""

    class Meta:
        model = Corpus
        fields = ["name", "description", "visibility", "readable_groups", "writable_groups"]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3}),
            "readable_groups": forms.CheckboxSelectMultiple,
            "writable_groups": forms.CheckboxSelectMultiple,
        }

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
        for setting in settings_declared():
            if setting.staff_only and not user.is_staff:
                continue
            self.fields[setting.name] = setting.form_field()
            if self.instance.pk:
                self.initial[setting.name] = getattr(self.instance, setting.name)
        # What the option costs, measured where it can be, before the owner turns it on.
        self.fields["meaning_channel"].help_text = (
            f"{self.fields['meaning_channel'].help_text} "
            f"{meaning_cost(self.instance if self.instance.pk else None)}"
        )

    def rebuild_changed(self) -> bool:
        """Whether a changed setting waits for the next build (after `is_valid`)."""
        return any(setting.rebuild and setting.name in self.changed_data for setting in settings_declared())


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
        label="Files",
        help_text="PDF, Word (DOCX), Excel (XLSX), PowerPoint (PPTX), OpenDocument (ODT, ODS, ODP), EPUB, "
                  "CSV/TSV, e-mail (EML, MBOX, MSG), images and scans (PNG, JPEG, TIFF, WebP: read by OCR), "
                  "source code, Markdown, text, HTML, XML, JSON, JSONL or Parquet, or a ZIP of such files. "
                  "Several at once; drop a folder to upload all its files.",
    )
    # A document's own readers, narrower than the corpus's (corpus.document_access); both blank: the
    # corpus's readers. Names are checked before any file is stored.
    reader_groups = forms.CharField(
        label="Only these groups", required=False, max_length=1000,
        widget=forms.TextInput(attrs={"placeholder": "hr, sales"}),
        help_text="Leave both blank for the corpus's readers.",
    )
    reader_users = forms.CharField(
        label="Only these people", required=False, max_length=1000,
        widget=forms.TextInput(attrs={"placeholder": "usernames"}),
    )

    def __init__(self, *args, upload_errors: dict | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.upload_errors = upload_errors or {}

    def clean(self) -> dict:
        if "file" in self.upload_errors:
            self.errors.pop("file", None)
            raise forms.ValidationError(self.upload_errors["file"])
        return super().clean()
