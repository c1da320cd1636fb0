"""What a new user tripped over in the first hour (issue 31): each seen from the pages."""

from __future__ import annotations

from django.urls import reverse

from chat.services import conversation_create, message_create_user
from core import runtime
from corpus.models import Corpus
from corpus.services.corpora import corpus_create
from tests.plugins.portal import SMALL_HDC, login


def test_the_new_corpus_form_offers_groups_only_to_someone_in_a_group(owner, member):
    lonely = login(owner).get(reverse("corpus:new")).content.decode()
    assert "Readable groups" not in lonely and "Writable groups" not in lonely
    assert 'name="visibility"' in lonely  # the rest of the form is there
    grouped = login(member).get(reverse("corpus:new")).content.decode()
    assert "Readable groups" in grouped and 'value="' in grouped and "readers" in grouped
    created = login(owner).post(
        reverse("corpus:new"),
        {
            "name": "Solo",
            "visibility": "private",
            "hdc_dimensions": 4096,
            "hdc_seed": 42,
            "hdc_ngram": 5,
            "chunk_size": 256,
        },
    )
    assert created.status_code == 302 and Corpus.objects.get(name="Solo").owner == owner


def test_two_conversations_begun_alike_get_titles_that_tell_them_apart(owner):
    titles = []
    for _ in range(3):
        conversation = conversation_create(user=owner)
        message_create_user(conversation_id=conversation.pk, content="What is the MPL's cure period?")
        conversation.refresh_from_db()
        titles.append(conversation.title)
    assert titles == ["What is the MPL's cure period?", "What is the MPL's cure period? (2)",
                      "What is the MPL's cure period? (3)"]


def test_a_corpus_open_to_everyone_is_not_called_shared(owner, outsider):
    corpus_create(owner=owner, name="Handbook", visibility=Corpus.Visibility.EVERYONE, **SMALL_HDC)
    home = login(outsider).get(reverse("home")).content.decode()
    assert "open to everyone, from owner" in home and "shared by owner" not in home


def test_the_temperature_field_shows_its_default_whole(owner):
    conversation = conversation_create(user=owner)
    page = login(owner).get(reverse("chat:detail", args=[conversation.pk])).content.decode()
    default = runtime.engine_config().temperature
    assert f'placeholder="{default:g}"' in page or f'placeholder="{default}"' in page
    assert "(defau" not in page and f"the model's default, {default}" in page


def test_a_new_user_sees_the_first_steps_beside_a_corpus_open_to_everyone(owner, outsider):
    # As `./portal run` leaves it: the admin's demo corpus is open to everyone.
    corpus_create(
        owner=owner, name="Python documentation", visibility=Corpus.Visibility.EVERYONE, **SMALL_HDC
    )
    client = login(outsider)
    home = client.get(reverse("home")).content.decode()
    assert 'id="first-run"' in home and 'id="dashboard-corpora"' in home and "Python documentation" in home
    conversation_create(user=outsider)
    assert 'id="first-run"' not in client.get(reverse("home")).content.decode()


def test_the_store_page_says_it_lists_pushed_embeddings_not_datasets(owner):
    from tests.plugins.portal import upload

    corpus = corpus_create(owner=owner, name="Licenses", **SMALL_HDC)
    upload(corpus, owner)
    page = login(owner).get(reverse("corpus:store_documents", args=[corpus.pk])).content.decode()
    assert 'id="store-about"' in page and "integrations push through the API" in page
    assert "No embeddings pushed yet (this corpus's datasets are searched" in page
