"""Each corpus setting declared once (corpus.corpus_settings): the model, the form, the settings
page, the API and its schema, and the build parameters derive from the declaration, and one
service checks every edit."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import fields

import pytest
import yaml
from django.core.validators import MaxValueValidator, MinValueValidator
from django.test import Client
from django.urls import reverse

from api.serializers import CorpusSerializer, CorpusWriteSerializer
from corpus import corpus_settings
from corpus.build_parameters import BuildParameters
from corpus.corpus_settings import CorpusSetting
from corpus.forms import CorpusForm
from corpus.models import Corpus
from corpus.services.builds import corpus_parameters
from corpus.services.corpora import CorpusSettingsInvalid, corpus_create, corpus_update
from engine.config import CONFIG_BOUNDS, Bounds
from tests.plugins.api import error_of, token_client
from tests.plugins.portal import login

DUMMY = CorpusSetting("dummy_depth", "Dummy depth", int, 3, "A test's setting: how deep the dummy goes.",
                      rebuild=True, bounds=Bounds(1, 9))
BOTH_CHANNELS = "choose one of the two"


def _forget_computed_fields() -> None:
    """Serializer instances made once at import (the API's schema annotations: a page's `results`)
    keep the fields DRF computed for them the first time; a declaration changed at run time must be
    computed again, before the test and after it (else the next test's schema keeps the dummy)."""
    for instance in gc.get_objects():
        if type(instance) in (CorpusSerializer, CorpusWriteSerializer):  # never a weak proxy's referent
            instance.__dict__.pop("fields", None)


@pytest.fixture
def dummy_declared(monkeypatch) -> Iterator[CorpusSetting]:
    """The declaration with one more setting. A class attribute stands in for its column: a real
    setting gets one from `model_field` and a migration, and a test cannot add a column to a table."""
    monkeypatch.setattr(corpus_settings, "SETTINGS", (*corpus_settings.SETTINGS, DUMMY))
    monkeypatch.setattr(Corpus, DUMMY.name, DUMMY.default, raising=False)
    _forget_computed_fields()
    yield DUMMY
    monkeypatch.undo()
    _forget_computed_fields()


def _schema() -> dict:
    response = Client().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_a_setting_added_to_the_declaration_reaches_every_surface(dummy_declared, corpus, owner):
    form = CorpusForm(instance=corpus, user=owner)
    field = form.fields["dummy_depth"]
    assert (field.label, field.min_value, field.max_value, field.initial) == ("Dummy depth", 1, 9, 3)
    client = login(owner)
    url = reverse("corpus:edit", args=[corpus.pk])
    page = client.get(url).content.decode()
    assert "Dummy depth" in page and "how deep the dummy goes" in page
    assert 'name="dummy_depth" value="3" min="1" max="9"' in page
    data = {"name": corpus.name, "visibility": corpus.visibility, "hdc_dimensions": corpus.hdc_dimensions,
            "hdc_seed": corpus.hdc_seed, "hdc_ngram": corpus.hdc_ngram, "chunk_size": corpus.chunk_size}
    assert "less than or equal to 9" in client.post(url, {**data, "dummy_depth": 12}).content.decode()
    saved = client.post(url, {**data, "dummy_depth": 7}, follow=True).content.decode()
    assert "Index settings apply to the next build" in saved  # declared `rebuild`

    components = _schema()["components"]["schemas"]
    for shape in ("CorpusWriteRequest", "PatchedCorpusWriteRequest"):
        declared = components[shape]["properties"]["dummy_depth"]
        assert (declared["type"], declared["minimum"], declared["maximum"]) == ("integer", 1, 9), shape
    shown = components["Corpus"]["properties"]["dummy_depth"]
    assert shown["type"] == "integer" and "how deep the dummy goes" in shown["description"]
    assert "dummy_depth" in components["Corpus"]["required"]
    api = token_client(owner)
    refused = api.patch(f"/api/v1/corpora/{corpus.pk}/", {"dummy_depth": 0}, format="json")
    assert refused.status_code == 400 and "dummy_depth" in error_of(refused)["details"]
    accepted = api.patch(f"/api/v1/corpora/{corpus.pk}/", {"dummy_depth": 8}, format="json")
    assert accepted.status_code == 200 and accepted.json()["dummy_depth"] == 8

    with pytest.raises(CorpusSettingsInvalid) as refusal:
        corpus_update(corpus=corpus, dummy_depth=10)
    assert refusal.value.details == {"dummy_depth": ["Must be in 1..9."]} and refusal.value.status == 400
    corpus_update(corpus=corpus, dummy_depth=5)
    assert corpus_parameters(corpus).to_json()["dummy_depth"] == 5


def test_each_declared_setting_is_a_column_made_from_its_declaration():
    recorded = {f.name for f in fields(BuildParameters)}
    for setting in corpus_settings.SETTINGS:
        column = Corpus._meta.get_field(setting.name)
        assert (column.verbose_name, column.help_text, column.get_default()) == (
            setting.label, setting.help_text, setting.default), setting.name
        if setting.rebuild:
            assert setting.name in recorded, f"a build would keep {setting.name} but never read it"
        if setting.kind is not int:
            continue
        limits = {type(v): v.limit_value for v in column.validators
                  if isinstance(v, (MinValueValidator, MaxValueValidator))}
        assert (limits[MinValueValidator], limits[MaxValueValidator]) == (
            setting.bounds.low,
            setting.bounds.high,
        )
        engine = CONFIG_BOUNDS[setting.name]  # every integer setting is an engine setting, narrowed at most
        assert setting.bounds.low >= engine.low and (
            engine.high is None or setting.bounds.high <= engine.high
        )


def test_the_engine_refuses_a_declaration_that_widens_its_range():
    with pytest.raises(ValueError, match="widens the engine's in 1..16"):
        CONFIG_BOUNDS["hdc_ngram"].narrowed(high=32)
    assert CONFIG_BOUNDS["hdc_dimensions"].narrowed(high=65536) == Bounds(64, 65536)


def test_the_page_and_the_api_refuse_alike_through_the_service(corpus, owner):
    """Once the model said seed >= 1 and the API >= 0; the meaning / late-interaction rule was
    written on both surfaces. Now both ask the declaration, through the service."""
    api = token_client(owner)
    seed = api.post("/api/v1/corpora/", {"name": "Seedless", "hdc_seed": 0}, format="json")
    assert seed.status_code == 400 and "hdc_seed" in error_of(seed)["details"]
    corpus_update(corpus=corpus, late_interaction=True)
    both = api.patch(f"/api/v1/corpora/{corpus.pk}/", {"meaning_channel": True}, format="json")
    assert both.status_code == 400 and error_of(both)["code"] == "invalid"
    assert BOTH_CHANNELS in error_of(both)["details"]["meaning_channel"][0]
    form = {"name": corpus.name, "visibility": corpus.visibility, "hdc_dimensions": corpus.hdc_dimensions,
            "hdc_seed": corpus.hdc_seed, "hdc_ngram": corpus.hdc_ngram, "chunk_size": corpus.chunk_size,
            "late_interaction": "on", "meaning_channel": "on", "description": "changed"}
    page = login(owner).post(reverse("corpus:edit", args=[corpus.pk]), form)
    assert page.status_code == 200 and BOTH_CHANNELS in page.content.decode()
    corpus.refresh_from_db()
    assert corpus.description == "" and not corpus.meaning_channel  # nothing saved


def test_an_unchanged_setting_is_not_checked_again(owner):
    """A model file removed since it was chosen must not block changing the description; changing
    the model to it does fail."""
    corpus = corpus_create(owner=owner, name="Old model")
    Corpus.objects.filter(pk=corpus.pk).update(gguf_path="/nonexistent/removed.gguf")
    corpus.refresh_from_db()
    corpus_update(corpus=corpus, description="still editable", gguf_path="/nonexistent/removed.gguf")
    assert Corpus.objects.get(pk=corpus.pk).description == "still editable"
    with pytest.raises(CorpusSettingsInvalid) as refusal:
        corpus_update(corpus=corpus, gguf_path="/nonexistent/other.gguf")
    assert "Not a readable GGUF model" in refusal.value.details["gguf_path"][0]
