from __future__ import annotations

from django import forms


class SearchForm(forms.Form):
    q = forms.CharField(label="Query", max_length=2000, widget=forms.TextInput(attrs={"autofocus": True}))
    corpora = forms.TypedMultipleChoiceField(
        coerce=int, required=False, widget=forms.CheckboxSelectMultiple, help_text="None chosen: all."
    )
    top_document = forms.BooleanField(required=False, label="Top document only")

    def __init__(self, *args, corpora, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["corpora"].choices = [(c.pk, c.name) for c in corpora]
