"""The real llama.cpp server: health, tokenize, chat (plain and streamed), errors, shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from engine.llama_server import (
    DEFAULT_CACHE_RAM_MIB,
    LlamaServer,
    LlamaServerError,
    ServerOptions,
    _parse_args,
    free_port,
)
from engine.tokenizer import LlamaCppTokenizer, LLMUnavailableError
from tests.plugins.waiting import wait_until


def test_health_reports_ok(llama_server):
    response = requests.get(f"{llama_server.base_url}/health", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_props_show_builtin_gemma_template_and_unified_context(llama_server):
    props = requests.get(f"{llama_server.base_url}/props", timeout=10).json()
    assert props["chat_template"] == "gemma"
    assert props["total_slots"] == 4
    # Unified KV cache: every slot may use the whole 8192-token context.
    assert props["default_generation_settings"]["n_ctx"] == 8192


def test_tokenize_and_detokenize_round_trip(llama_server):
    base = llama_server.base_url
    tokens = requests.post(f"{base}/tokenize", json={"content": "Hello world"}, timeout=10).json()["tokens"]
    assert tokens == [9259, 1902]  # "Hello", "▁world" in Gemma 3's vocabulary
    text = requests.post(f"{base}/detokenize", json={"tokens": tokens}, timeout=10).json()["content"]
    assert text == "Hello world"


def _chat_payload(**extra):
    return {
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 24,
        "temperature": 0.0,
        **extra,
    }


def test_chat_completion_returns_text_and_usage(llama_server):
    response = requests.post(
        f"{llama_server.base_url}/v1/chat/completions", json=_chat_payload(), timeout=120
    )
    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["message"]["content"].strip()
    usage = body["usage"]
    # The gemma template wraps the message in turn markers: more prompt tokens than the text alone.
    assert usage["prompt_tokens"] > 5
    assert 0 < usage["completion_tokens"] <= 24


def test_streamed_chat_arrives_as_several_sse_chunks(llama_server):
    url = f"{llama_server.base_url}/v1/chat/completions"
    deltas: list[str] = []
    done = False
    with requests.post(url, json=_chat_payload(stream=True), stream=True, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        # Lines of bytes, decoded after: decode_unicode splits with str.splitlines, which cuts a
        # JSON string holding U+2028 or NEL (the model may write either) in two.
        for raw in response.iter_lines():
            line = raw.decode("utf-8")
            if not line:
                continue
            assert line.startswith("data: ")
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            for choice in chunk["choices"]:
                content = choice.get("delta", {}).get("content")
                if content:
                    deltas.append(content)
    assert done
    assert len(deltas) >= 3
    assert "".join(deltas).strip()
    # Greedy decoding: the streamed text equals the non-streamed one.
    plain = requests.post(url, json=_chat_payload(), timeout=120).json()["choices"][0]["message"]["content"]
    assert "".join(deltas) == plain


def test_client_error_for_closed_port_names_the_url():
    port = free_port()
    with pytest.raises(LLMUnavailableError, match=f"127.0.0.1:{port}"):
        LlamaCppTokenizer(f"http://127.0.0.1:{port}", timeout=2)


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(LlamaServerError, match="GGUF model not found"):
        LlamaServer(tmp_path / "absent.gguf")


def test_bad_options_are_rejected(gemma_gguf):
    with pytest.raises(LlamaServerError, match="threads must be >= 1"):
        ServerOptions(gguf_path=gemma_gguf, threads=0)


@pytest.mark.service
def test_the_prompt_cache_is_bounded(gemma_gguf):
    """llama.cpp's own default keeps up to 8 GiB of saved slot states; the portal gives it a limit,
    from the LlamaServer option through the child's command line into xllamacpp's parameters."""
    with pytest.raises(LlamaServerError, match="cache_ram_mib must be >= 0"):
        ServerOptions(gguf_path=gemma_gguf, cache_ram_mib=-1)
    assert ServerOptions(gguf_path=gemma_gguf).cache_ram_mib == DEFAULT_CACHE_RAM_MIB < 8192
    command = LlamaServer(gemma_gguf, cache_ram_mib=64).command()
    arguments = command[command.index("engine.llama_server") + 1:]
    arguments[arguments.index("--port") + 1] = "0"  # chosen at start()
    options, _ = _parse_args(arguments)
    assert options.cache_ram_mib == 64
    with LlamaServer(gemma_gguf, ctx_size=1024, parallel=1, cache_ram_mib=0) as server:
        assert requests.get(f"{server.base_url}/health", timeout=5).status_code == 200


# A fresh interpreter frees one 12 MiB block (a saved slot state the prompt cache evicted), then
# asks for a 4 MiB one: glibc's mallinfo2 says whether that came from a mapping of its own.
_NEXT_STATE_IS_MAPPED = """
import ctypes, sys
from engine.llama_server import fix_mmap_threshold
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
libc.free(libc.malloc(12 << 20))
state = libc.malloc(4 << 20)
print(libc.mallinfo2().hblkhd >= 4 << 20)
"""


@pytest.mark.parametrize("threshold, mapped", [("default", "False"), ("fixed", "True")])
def test_a_fixed_mmap_threshold_keeps_saved_states_off_the_heap(threshold, mapped):
    """The allocator setting llama.cpp's process makes before it starts (engine.llama_server.main):
    without it glibc serves the next state from the heap, where evictions fragment it."""
    result = subprocess.run([sys.executable, "-c", _NEXT_STATE_IS_MAPPED, threshold], capture_output=True,
                            text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == mapped


@pytest.mark.service
def test_corrupt_model_fails_startup_with_log(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF" + b"\x00" * 64)
    server = LlamaServer(bogus, startup_timeout=60)
    with pytest.raises(LlamaServerError, match="exited with code"):
        server.start()
    assert not server.running


@pytest.mark.service
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_module_process_shuts_down_cleanly_on_signal(gemma_gguf, stop_signal, tmp_path):
    port = free_port()
    repo_root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "engine.llama_server", "--gguf", str(gemma_gguf),
               "--port", str(port), "--ctx-size", "1024", "--parallel", "1"]
    # Into a file, not a pipe: llama.cpp logs tens of KB, and a pipe nobody reads fills up and
    # blocks the server's logging (and so its shutdown).
    log = tmp_path / "llama.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=repo_root, stdout=output, stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")[-2000:]
            try:
                return requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(healthy, what="the llama.cpp server healthy", every=0.2)
        process.send_signal(stop_signal)
        assert process.wait(30) == 0, log.read_text(errors="replace")[-2000:]
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie, not yet reaped by its new parent, has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.service
def test_a_server_whose_owner_is_killed_shuts_down(gemma_gguf, tmp_path):
    """A `LlamaServer` owner killed outright (no cleanup runs) does not leave its server behind."""
    repo_root = Path(__file__).resolve().parents[2]
    owner_code = ("import sys, time; from engine.llama_server import LlamaServer; "
                  "server = LlamaServer(sys.argv[1], ctx_size=1024, parallel=1).start(); "
                  "print(server._process.pid, server.port, flush=True); time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", owner_code, str(gemma_gguf)], cwd=repo_root,
                             stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child, port = map(int, owner.stdout.readline().split())
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        owner.kill()
        owner.wait()
        wait_until(lambda: not _alive(child), what="the orphaned server exiting", every=0.2)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if child is not None and _alive(child):  # the flaw under test: do not leave it running
            os.kill(child, signal.SIGKILL)


@pytest.mark.service
def test_the_chat_model_is_served_with_its_own_template():
    """The packaged instruct model runs with the ChatML template its GGUF carries (Jinja), not a
    built-in one: its end-of-turn token then ends every answer."""
    from engine.model_files import default_chat_gguf_path

    with LlamaServer(default_chat_gguf_path(), ctx_size=1024, parallel=1) as server:
        props = requests.get(f"{server.base_url}/props", timeout=10).json()
        assert "<|im_start|>" in props["chat_template"] and "<|im_end|>" in props["chat_template"]
        reply = requests.post(
            f"{server.base_url}/apply-template",
            timeout=30,
            json={
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
            },
        ).json()
        assert reply["prompt"].startswith(
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>"
        )


@pytest.mark.service
def test_ignore_eos_runs_every_answer_to_its_max_tokens(chat_llama_server):
    """`bench.load --fixed-length`: with llama-server's --ignore-eos every answer is exactly its
    max_tokens long, even one the model would end at once; the session's server of the same model
    without it ends the same request early."""
    from engine.model_files import default_chat_gguf_path

    command = LlamaServer(default_chat_gguf_path(), ignore_eos=True).command()
    arguments = command[command.index("engine.llama_server") + 1:]
    arguments[arguments.index("--port") + 1] = "0"
    assert _parse_args(arguments)[0].ignore_eos and not _parse_args(arguments[:-1])[0].ignore_eos
    request = {"messages": [{"role": "user", "content": "Reply with the single word: yes"}],
               "max_tokens": 24, "temperature": 0}

    def length(server: LlamaServer) -> tuple[int, str]:
        reply = requests.post(f"{server.base_url}/v1/chat/completions", json=request, timeout=120).json()
        return reply["usage"]["completion_tokens"], reply["choices"][0]["finish_reason"]

    with LlamaServer(default_chat_gguf_path(), ctx_size=1024, parallel=1, ignore_eos=True) as server:
        assert length(server) == (24, "length")
    tokens, finish = length(chat_llama_server)
    assert tokens < 24 and finish == "stop"
