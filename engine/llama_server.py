"""A real llama.cpp HTTP server (the `xllamacpp` wheel) on a GGUF, in process or as a child process.

llama.cpp's own server provides `/health`, `/tokenize`, `/detokenize`, `/props` and the
OpenAI-compatible `/v1/chat/completions` (with SSE streaming). Run it as its own process:

    python -m engine.llama_server --gguf PATH --port 8080 --ctx-size 16384 --threads 2

It shuts down cleanly on SIGTERM or SIGINT. Tests and the portal's dev mode use
`LlamaServer`, which starts that command on a free port and waits for `/health`.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import requests

DEFAULT_HOST = "127.0.0.1"
# A small model on a 2-core machine: two compute threads, eight slots sharing one unified
# 16384-token KV cache, so several chats can run while each may use the whole context
# (`./portal run` gives it LLM_CONTEXT_SIZE x LLM_STREAMS instead: room for every slot's whole
# context at once, docs/scaling.md). Eight
# slots let every turn of a burst of eight start its prefill when the portal's queue admits it
# (one at a time) instead of waiting for an answer to end (docs/load-measurements.md: 8 users at
# once 0.68x the floor's median wait with 8 slots, against 1.03x with 4).
DEFAULT_THREADS = 2
DEFAULT_CTX_SIZE = 16384
DEFAULT_PARALLEL = 8
# Prompt tokens llama.cpp takes into one step (n_batch; n_ubatch, the physical batch, is at most it):
# a step also carries one token of every answer being decoded, so a smaller batch lets running
# answers go on between pieces of a new prompt (bench.load measures the choice).
DEFAULT_BATCH = 2048
# MiB of RAM for llama.cpp's prompt cache: the states of slots that another conversation took over,
# restored when their conversation returns instead of prefilling it again. llama.cpp's own default
# (8 GiB) lets a long-running server grow by each state it keeps until it reaches that; a few
# hundred MiB hold some twenty conversations of a 0.5B model (about 12 KiB a token) and cap the growth.
DEFAULT_CACHE_RAM_MIB = 256
# glibc's malloc gives a block above its mmap threshold a mapping of its own, returned to the system
# when the block is freed; but once such a block is freed it raises the threshold to that block's
# size (up to 32 MiB), so every later saved slot state (one block of 8-12 MiB for a 0.5B model's
# conversation) comes from a heap, where the prompt cache's evictions leave holes the process keeps:
# llama.cpp's RSS crept 7 %/h over a soak with its cache full. A fixed threshold turns that
# adjustment off (mallopt), so each state is mapped and unmapped whole.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


# "auto": the GGUF's own Jinja template when it ships one (instruction-tuned models do), else
# llama.cpp's built-in template for the architecture (the Gemma base GGUF ships none).
AUTO_TEMPLATE = "auto"
DEFAULT_CHAT_TEMPLATE = AUTO_TEMPLATE
_BUILTIN_TEMPLATES = {
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "llama": "llama3",
    "qwen2": "chatml",
}


# The environment variable that gives the served API its key (clients send it as a Bearer token).
API_KEY_VARIABLE = "LLAMA_API_KEY"


class LlamaServerError(RuntimeError):
    """The llama.cpp server could not be started or stopped."""


@dataclass(frozen=True)
class ServerOptions:
    gguf_path: Path
    host: str = DEFAULT_HOST
    port: int = 0  # 0: pick a free port
    ctx_size: int = DEFAULT_CTX_SIZE
    threads: int = DEFAULT_THREADS
    parallel: int = DEFAULT_PARALLEL
    chat_template: str | None = DEFAULT_CHAT_TEMPLATE
    batch: int = DEFAULT_BATCH
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB  # 0: no prompt cache
    # Every answer runs to its max_tokens (llama-server's --ignore-eos): a load benchmark's answers
    # then take the same time whatever they say, so two runs meet the same queue. Never for chat.
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not Path(self.gguf_path).is_file():
            raise LlamaServerError(f"GGUF model not found: {self.gguf_path}")
        for name in ("ctx_size", "threads", "parallel", "batch"):
            if getattr(self, name) < 1:
                raise LlamaServerError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.cache_ram_mib < 0:
            raise LlamaServerError(f"cache_ram_mib must be >= 0, got {self.cache_ram_mib}")
        if not 0 <= self.port < 65536:
            raise LlamaServerError(f"port must be in 0..65535, got {self.port}")


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def resolve_chat_template(gguf_path: str | Path, requested: str | None) -> str | None:
    """The llama.cpp built-in template name to force, or None to use the GGUF's own (Jinja).

    `requested` is a built-in name, None (the GGUF's own) or "auto": the GGUF's own template when
    it has one, else the built-in template of its architecture (chatml when unknown).
    """
    if requested != AUTO_TEMPLATE:
        return requested
    from engine.gguf import read_metadata

    metadata = read_metadata(gguf_path)
    if metadata.chat_template:
        return None
    return _BUILTIN_TEMPLATES.get(metadata.architecture, "chatml")


def start_in_process(options: ServerOptions):  # xllamacpp.Server has no stubs
    """Start llama.cpp's HTTP server in this process; it serves from its own threads.

    Returns the `xllamacpp.Server`; dropping the last reference stops it.
    """
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(options.gguf_path)
    params.hostnames = [options.host]
    params.port = options.port or free_port(options.host)
    params.n_ctx = options.ctx_size
    params.n_parallel = options.parallel
    params.n_batch = options.batch
    params.n_ubatch = min(params.n_ubatch, options.batch)
    params.kv_unified = True
    params.cache_ram_mib = options.cache_ram_mib
    params.cpuparams.n_threads = options.threads
    params.cpuparams_batch.n_threads = options.threads
    params.n_gpu_layers = 0
    params.sampling.ignore_eos = options.ignore_eos
    # Its API key, from the environment (llama-server's own variable), never on a command line
    # where any local user could read it.
    if os.environ.get(API_KEY_VARIABLE):
        params.api_keys = [os.environ[API_KEY_VARIABLE]]
    template = resolve_chat_template(options.gguf_path, options.chat_template)
    if template:
        # A built-in template name ("gemma", "chatml", ...) only works with Jinja off;
        # with Jinja on, llama.cpp would treat the name itself as the template text.
        params.chat_template = template
        params.use_jinja = False
    else:
        params.use_jinja = True
    return xllamacpp.Server(params)


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix this process's malloc mmap threshold (glibc's `mallopt`); False where the C library has
    no such setting (not glibc) or refuses it. Call it before the blocks it should govern exist."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return mallopt(_M_MMAP_THRESHOLD, threshold) == 1


def _health_ok(base_url: str) -> bool:
    try:
        response = requests.get(f"{base_url}/health", timeout=2)
    except requests.RequestException:
        return False
    return response.status_code == 200 and response.json().get("status") == "ok"


class LlamaServer:
    """llama.cpp's server as a child process (`python -m engine.llama_server`) on a free port.

    A child process keeps a crash in native code from taking the caller down.
    Use as a context manager, or call `start()` / `stop()`.
    """

    def __init__(
        self,
        gguf_path: str | Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        ctx_size: int = DEFAULT_CTX_SIZE,
        threads: int = DEFAULT_THREADS,
        parallel: int = DEFAULT_PARALLEL,
        chat_template: str | None = DEFAULT_CHAT_TEMPLATE,
        startup_timeout: float = 120.0,
        batch: int = DEFAULT_BATCH,
        cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB,
        api_key: str = "",
        ignore_eos: bool = False,
    ) -> None:
        self.api_key = api_key  # required of every client when set (`API_KEY_VARIABLE`)
        self.options = ServerOptions(
            gguf_path=Path(gguf_path),
            host=host,
            port=port,
            ctx_size=ctx_size,
            threads=threads,
            parallel=parallel,
            chat_template=chat_template,
            batch=batch,
            cache_ram_mib=cache_ram_mib,
            ignore_eos=ignore_eos,
        )
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._process: subprocess.Popen | None = None
        self._log: tempfile._TemporaryFileWrapper | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LlamaServerError("the llama.cpp server is not started")
        return f"http://{self.options.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (for signals: a test pauses it), else None."""
        return self._process.pid if self.running else None

    def command(self) -> list[str]:
        options = self.options
        command = [
            sys.executable, "-m", "engine.llama_server",
            "--gguf", str(options.gguf_path),
            "--host", options.host,
            "--port", str(self.port),
            "--ctx-size", str(options.ctx_size),
            "--threads", str(options.threads),
            "--parallel", str(options.parallel),
            "--batch-size", str(options.batch),
            "--cache-ram", str(options.cache_ram_mib),
        ]
        command += ["--chat-template", options.chat_template or "", "--exit-with-parent"]
        if options.ignore_eos:
            command.append("--ignore-eos")
        return command

    def start(self) -> LlamaServer:
        """Start the child and wait until `/health` says ok; raise `LlamaServerError` otherwise."""
        if self.running:
            return self
        self.port = self.options.port or free_port(self.options.host)
        # Lives as long as the child and is closed in stop(): not a `with` block.
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        repo_root = Path(__file__).resolve().parent.parent
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])),
            API_KEY_VARIABLE: self.api_key,
        }
        self._process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise LlamaServerError(
                    f"llama.cpp server for {self.options.gguf_path} exited with code {code} during startup; "
                    f"log tail:\n{self.log_tail()}"
                )
            if _health_ok(self.base_url):
                return self
            time.sleep(0.2)
        self.stop()
        raise LlamaServerError(
            f"llama.cpp server at {self.base_url} was not healthy within {self.startup_timeout:.0f}s; "
            f"log tail:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait, then SIGKILL if it does not exit in `timeout` seconds."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()

    def log_tail(self, n_bytes: int = 4000) -> str:
        if self._log is None:
            return ""
        try:
            data = Path(self._log.name).read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode("utf-8", errors="replace")

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _parse_args(argv: list[str] | None) -> tuple[ServerOptions, bool]:
    parser = argparse.ArgumentParser(description="Serve a GGUF with llama.cpp's HTTP server (xllamacpp).")
    parser.add_argument("--gguf", required=True, type=Path, help="path to the GGUF model")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx-size", type=int, default=DEFAULT_CTX_SIZE, help="total KV cache tokens")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL, help="concurrent request slots")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH,
                        help="prompt tokens per step (llama.cpp's n_batch; n_ubatch is capped by it)")
    parser.add_argument("--cache-ram", type=int, default=DEFAULT_CACHE_RAM_MIB,
                        help="MiB of RAM for the prompt cache of slots' saved states (0: none)")
    parser.add_argument("--chat-template", default=DEFAULT_CHAT_TEMPLATE,
                        help="llama.cpp built-in template name; '' keeps the GGUF's own template; "
                             "auto (default): the GGUF's own, else the architecture's built-in one")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every answer runs to its max_tokens (load benchmarks: answers of one length)")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="shut down when the process that started this one ends (LlamaServer's children)")
    args = parser.parse_args(argv)
    try:
        return ServerOptions(
            gguf_path=args.gguf, host=args.host, port=args.port, ctx_size=args.ctx_size,
            threads=args.threads, parallel=args.parallel, chat_template=args.chat_template or None,
            batch=args.batch_size, cache_ram_mib=args.cache_ram, ignore_eos=args.ignore_eos,
        ), args.exit_with_parent
    except LlamaServerError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def _stop_when_orphaned(parent: int, interval: float = 1.0) -> None:
    """Send this process SIGTERM once its parent has gone (it is then re-parented): a `LlamaServer`
    owner killed outright (SIGKILL, or SIGTERM without cleanup) would otherwise leave its server
    running, holding the model's memory and its CPU. Polling, not PR_SET_PDEATHSIG, which fires
    when the *thread* that started the child ends."""
    while os.getppid() == parent:
        time.sleep(interval)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> NoReturn:
    options, exit_with_parent = _parse_args(argv)
    if options.port == 0:
        options = dataclasses.replace(options, port=free_port(options.host))
    # Block the stop signals before llama.cpp starts its threads (they inherit the mask),
    # so SIGTERM/SIGINT reach only this thread's sigwait and shutdown runs here, in order.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    if exit_with_parent:  # started after the mask, so the signal waits for the sigwait below
        threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True,
                         name="exit-with-parent").start()
    fix_mmap_threshold()
    server = start_in_process(options)  # serves until the process ends
    print(f"llama.cpp server ready on http://{options.host}:{options.port}", flush=True)
    received = signal.sigwait(stop_signals)
    print(f"received {signal.Signals(received).name}, shutting down (server {server.listening_address})",
          flush=True)
    # Exit without running xllamacpp's Server destructor: it joins llama.cpp's main loop with the
    # GIL held and sometimes waits forever when the stop comes soon after startup (about one time
    # in three with SIGTERM right after /health answers). llama.cpp keeps nothing on disk; the
    # kernel closes its socket and frees its memory as the process ends.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
