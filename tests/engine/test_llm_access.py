"""engine.llm against a real llama.cpp server that requires an API key (llama-server's own key
check, `LLAMA_API_KEY`): the key is sent as a Bearer token, a wrong or missing one is a clear
`LLMUnauthorizedError` that never shows the key, and what a server offers is learnt once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.llama_server import LlamaServer
from engine.llm.client import LLMClient
from engine.llm.errors import LLMUnauthorizedError
from engine.llm.sampling import GenerationSettings
from engine.llm.tokens import ServerTokenCounter
from engine.llm_access import HIDDEN, Offered, redacted, scrub
from tests.plugins.llama import running

KEY = "sk-llmservers-test-0f3a9c"
GREEDY = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=8)
QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def keyed_server(gemma_gguf) -> Iterator[LlamaServer]:
    with running(LlamaServer(gemma_gguf, threads=1, ctx_size=2048, parallel=1, api_key=KEY)) as server:
        yield server


async def test_the_right_key_is_sent_and_the_server_answers(keyed_server):
    client = LLMClient(keyed_server.base_url, api_key=KEY)
    text, final = await client.complete(QUESTION, GREEDY)
    assert text.strip() and final.usage is not None
    assert await client.count_tokens("hello world") == 2
    assert client.offered.known() == {"tokenize": True}


@pytest.mark.parametrize("key", ["", "sk-wrong-key-77"])
async def test_a_wrong_or_missing_key_is_a_clear_error_that_never_shows_a_key(keyed_server, key):
    client = LLMClient(keyed_server.base_url, api_key=key)
    with pytest.raises(LLMUnauthorizedError) as caught:
        await client.complete(QUESTION, GREEDY)
    message = str(caught.value)
    assert caught.value.status == 401
    assert keyed_server.base_url in message and "refused the portal's credentials" in message
    assert "LLM_API_KEY" in message
    assert KEY not in message and (not key or key not in message)
    # Refused is not absent: the server is asked again once the key is right.
    assert await client.count_tokens("hello") is None
    assert client.offered.get("tokenize") is None


def test_the_token_counter_sends_the_key_and_estimates_when_refused(keyed_server):
    assert ServerTokenCounter(keyed_server.base_url, api_key=KEY).count_tokens("hello world") == 2
    refused = ServerTokenCounter(keyed_server.base_url, api_key="sk-wrong")
    assert refused.count_tokens("hello world") == 6  # the UTF-8 length / 2 upper bound
    assert refused.offered.get("tokenize") is None


def test_urls_are_shown_without_credentials_and_texts_without_the_key():
    assert redacted("https://user:pw@llm.example:8443/base?token=x") == "https://llm.example:8443/base"
    client = LLMClient("http://portal:s3cret@127.0.0.1:9", api_key=KEY)
    assert client.shown_url == "http://127.0.0.1:9"
    assert scrub(f"Received API Key = {KEY}", KEY) == f"Received API Key = {HIDDEN}"
    assert scrub("nothing to hide", "") == "nothing to hide"


def test_an_endpoint_is_known_absent_only_from_a_not_found_answer():
    offered = Offered()
    for status in (401, 403, 500, 503):
        offered.learn("tokenize", status)
    assert offered.get("tokenize") is None
    offered.learn("tokenize", 404)
    assert offered.get("tokenize") is False
    offered.learn("apply-template", 200)
    assert offered.known() == {"tokenize": False, "apply-template": True}
