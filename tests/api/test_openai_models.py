"""The OpenAI-compatible endpoint's `model` names a corpus and an LLM model (`<corpus>@<llm model>`),
through the official `openai` client against the real ASGI app and two real llama.cpp servers (Gemma
and the packaged chat model): the listed pairs are the user's models, the chosen model is the one
that answers and the reply names it, and a model kept for another group is a 404 in OpenAI's error
shape for an outsider, who never sees it listed."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from django.contrib.auth.models import Group

from accounts.services.tokens import api_token_create
from chat.models import LLMModel
from tests.plugins.chat import make_corpus
from tests.plugins.llama import slot_tasks


@pytest.fixture
def two_models(chat_settings, llama_server, chat_llama_server, owner):
    """Gemma (the admin's default, open to all) and the chat model, kept for the owner's team."""
    chat_settings.LLM_SERVERS = json.dumps([{"url": llama_server.base_url, "model": "gemma", "slots": 2},
                                            {"url": chat_llama_server.base_url, "model": "qwen", "slots": 2}])
    team = Group.objects.create(name="team")
    owner.groups.add(team)
    LLMModel.objects.create(name="qwen").groups.add(team)
    LLMModel.objects.create(name="gemma", is_default=True)
    return chat_settings


def _client(live_api, user) -> openai.OpenAI:  # noqa: ANN001
    return openai.OpenAI(base_url=f"{live_api.url}/api/v1", api_key=api_token_create(user=user, name="t")[1],
                         max_retries=0, timeout=120)


def test_models_are_corpus_and_llm_model_pairs_of_his_models(
    two_models, live_api, owner, outsider, pydoc_build
):
    corpus = make_corpus(owner, pydoc_build)
    c = f"corpus-{corpus.pk}"
    mine = [model.id for model in _client(live_api, owner).models.list()]
    assert mine == ["none", "none@gemma", "none@qwen", c, f"{c}@gemma", f"{c}@qwen"]
    theirs = _client(live_api, outsider)
    assert [model.id for model in theirs.models.list()] == ["none", "none@gemma"]
    assert _client(live_api, owner).models.retrieve(f"{c}@qwen").id == f"{c}@qwen"
    with pytest.raises(openai.NotFoundError):
        theirs.models.retrieve("none@qwen")


def test_the_chosen_model_answers_and_the_reply_names_it(two_models, live_api, owner, llama_server,
                                                         chat_llama_server, pydoc_build):
    corpus = make_corpus(owner, pydoc_build)
    client = _client(live_api, owner)
    question = [{"role": "user", "content": "What does a generator function return?"}]
    gemma, qwen = slot_tasks(llama_server), slot_tasks(chat_llama_server)
    whole = client.chat.completions.create(model=f"corpus-{corpus.pk}@qwen", messages=question, max_tokens=16)
    assert whole.model == f"corpus-{corpus.pk}@qwen" and whole.choices[0].message.content.strip()
    assert slot_tasks(chat_llama_server) != qwen and slot_tasks(llama_server) == gemma

    qwen = slot_tasks(chat_llama_server)
    bare = client.chat.completions.create(model="none", messages=question, max_tokens=8)
    assert bare.model == "none@gemma"  # bare: the admin's default model, named in the reply
    assert slot_tasks(llama_server) != gemma and slot_tasks(chat_llama_server) == qwen

    chunks = list(
        client.chat.completions.create(model="none@qwen", messages=question, max_tokens=8, stream=True)
    )
    assert {chunk.model for chunk in chunks} == {"none@qwen"}
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices).strip()
    assert slot_tasks(chat_llama_server) != qwen


@pytest.mark.parametrize("model", ["none@qwen", "none@gpt-9", "none@", "corpus-999999@gemma"])
def test_a_model_he_may_not_use_is_a_404_in_openais_shape(
    two_models, live_api, outsider, chat_llama_server, model
):
    before = slot_tasks(chat_llama_server)
    with pytest.raises(openai.NotFoundError) as refused:
        _client(live_api, outsider).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hello?"}], stream=model.endswith("qwen"))
    assert refused.value.code == "model_not_found" and model in refused.value.message
    body = httpx.post(f"{live_api.url}/api/v1/chat/completions",
                      headers={"Authorization": f"Bearer {api_token_create(user=outsider, name='h')[1]}"},
                      json={"model": model, "messages": [{"role": "user", "content": "Hello?"}]}).json()
    assert body["error"]["code"] == "model_not_found" and isinstance(body["error"]["message"], str)
    if "@" in model and not model.startswith("corpus-"):
        assert body["error"]["details"]["models"] == ["gemma"]  # his models: the kept one is not named
    assert slot_tasks(chat_llama_server) == before  # no turn reached the kept model's server
