"""A prompt is counted in the tokens of the model that answers it, on a server of that model, never on
`LLM_BASE_URL` when `LLM_SERVERS` names the servers: two real llama.cpp servers of different
vocabularies (Gemma, Qwen) count one text differently and each turn gets its own model's count; and
servers on loopback that record what they are asked show which one the chat's and the OpenAI-style
endpoint's turns were counted on."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from chat.llm import clients
from chat.models import Conversation
from chat.preparation import ConversationState, turn_prepare
from core import runtime
from engine.llm.prompt import assemble_prompt
from engine.llm.tokens import ServerTokenCounter, tokenize_body
from tests.plugins.api import error_of, token_client

pytestmark = pytest.mark.service

TEXT = "Tokenizers disagree: pneumonoultramicroscopicsilicovolcanoconiosis, naïve café, 12345678."


class RecordingServer(ThreadingHTTPServer):
    """An LLM server on loopback that records the path of each request: `/tokenize` answers one
    token per `chars_per_token` characters; anything else (a chat completion) is a 500, so a turn
    ends right after its prompt was counted."""

    def __init__(self, chars_per_token: int) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.chars_per_token = chars_per_token
        self.paths: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Recorder(BaseHTTPRequestHandler):
    server: RecordingServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.paths.append(self.path)
        if self.path == "/tokenize":
            count = -(-len(body.get("content", "")) // self.server.chars_per_token)
            self._send(200, {"tokens": list(range(count))})
        else:
            self._send(500, {"error": {"message": "this recorder does not answer"}})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        """Quiet: the test reads `paths`."""


@pytest.fixture
def recorders() -> Iterator[dict[str, RecordingServer]]:
    """Three recording servers: `a` and `b` (each its own model, counting differently) and `base`,
    where `LLM_BASE_URL` points."""
    servers = {"a": RecordingServer(1), "b": RecordingServer(3), "base": RecordingServer(2)}
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in servers.values()]
    for thread in threads:
        thread.start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def _server_count(base_url: str, text: str) -> int:
    response = requests.post(f"{base_url}/tokenize", json=tokenize_body(text), timeout=60)
    response.raise_for_status()
    return len(response.json()["tokens"])


def test_each_model_counts_a_prompt_in_its_own_tokens(chat_settings, llama_server, chat_llama_server, owner):
    chat_settings.LLM_SERVERS = json.dumps([{"url": llama_server.base_url, "model": "gemma"},
                                            {"url": chat_llama_server.base_url, "model": "qwen"}])
    gemma, qwen = _server_count(llama_server.base_url, TEXT), _server_count(chat_llama_server.base_url, TEXT)
    assert gemma != qwen  # two vocabularies: the test can tell whose count a turn got
    assert clients.token_counter(model="gemma").count_tokens(TEXT) == gemma
    assert clients.token_counter(model="qwen").count_tokens(TEXT) == qwen
    assert clients.token_counter().count_tokens(TEXT) == gemma  # no model: the pool's default, the first
    system_prompt = runtime.engine_config().system_prompt
    for model, server in (("gemma", llama_server), ("qwen", chat_llama_server)):
        prepared = turn_prepare(user=owner, state=ConversationState(), question=TEXT, model=model)
        counter = ServerTokenCounter(server.base_url)
        expected = assemble_prompt(system_prompt=system_prompt, history=(), user_message=TEXT, memories=[],
                                   tokenizer=counter, budget=clients.context_budget())
        assert prepared.plan.prompt_tokens == expected.prompt_tokens, model


def test_with_llm_servers_alone_the_turn_is_counted_on_its_models_server(settings, transactional_db, data_dir,
                                                                         recorders, owner):
    """Both chat surfaces: a conversation of model `b` and a completion of `none@b` are counted on
    `b`'s server only; `a`'s and `LLM_BASE_URL`'s are never asked."""
    settings.LLM_BASE_URL = recorders["base"].url
    settings.LLM_SERVERS = json.dumps([{"url": recorders["a"].url, "model": "a"},
                                       {"url": recorders["b"].url, "model": "b"}])
    client = token_client(owner)
    conversation = Conversation.objects.create(owner=owner, model="b")
    turn = client.post(f"/api/v1/conversations/{conversation.pk}/messages/", {"content": TEXT}, format="json")
    assert turn.status_code == 503 and error_of(turn)["code"] == "llm_http_error", turn.content
    assert "/tokenize" in recorders["b"].paths and "/v1/chat/completions" in recorders["b"].paths
    asked_in_turn = len(recorders["b"].paths)
    completion = client.post("/api/v1/chat/completions", {"model": "none@b", "messages": [
        {"role": "user", "content": f"{TEXT} Once more."}]}, format="json")
    assert completion.status_code == 503, completion.content
    assert error_of(completion)["code"] == "llm_unavailable"
    assert recorders["b"].paths[asked_in_turn:].count("/tokenize") >= 1
    assert recorders["a"].paths == [] and recorders["base"].paths == []
