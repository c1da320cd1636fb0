from __future__ import annotations

from django import forms
from django.contrib.auth.models import Group

from corpus.models import Corpus
from engine.gguf import GGUFError, read_metadata


class CorpusForm(forms.ModelForm):
    """Create/edit a corpus. The model path is a path on the server, so only staff may set it."""

    class Meta:
        model = Corpus
        fields = ["name", "description", "visibility", "readable_groups", "writable_groups", "hdc_dimensions",
                  "hdc_seed", "hdc_ngram", "chunk_size", "gguf_path", "late_interaction"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3}),
                   "readable_groups": forms.CheckboxSelectMultiple, "writable_groups": forms.CheckboxSelectMultiple}

    def __init__(self, *args, user, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        super().__init__(*args, **kwargs)
        groups = Group.objects.all() if user.is_superuser else user.groups.all()
        self.fields["readable_groups"].queryset = groups
        self.fields["writable_groups"].queryset = groups
        if not user.is_staff:
            del self.fields["gguf_path"]

    def clean_gguf_path(self) -> str:
        path = self.cleaned_data.get("gguf_path", "").strip()
        if path:
            try:
                metadata = read_metadata(path)
            except (GGUFError, OSError) as error:
                raise forms.ValidationError(f"Not a readable GGUF model: {error}") from None
            # Builds and searches tokenize in process, which covers SentencePiece vocabularies.
            if metadata.tokenizer_model != "llama":
                raise forms.ValidationError(
                    f"This model's tokenizer is {metadata.tokenizer_model!r}; index builds need a SentencePiece "
                    "('llama') vocabulary, such as Gemma's. A chat model need not be one: it is served by the "
                    "LLM server.")
        return path


class DatasetUploadForm(forms.Form):
    file = forms.FileField(help_text="JSON, JSONL, Parquet, text, Markdown, HTML or XML; UTF-8.")

    def __init__(self, *args, upload_errors: dict | None = None, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.upload_errors = upload_errors or {}

    def clean(self) -> dict:
        if "file" in self.upload_errors:
            self.errors.pop("file", None)
            raise forms.ValidationError(self.upload_errors["file"])
        return super().clean()
