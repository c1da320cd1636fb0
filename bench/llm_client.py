"""The LLM client's connection pool: time to first token and a token count, pooled or not.

    python -m bench.llm_client [--runs 40] [--gap 0.5] [--threads 2]

What runs: one real llama.cpp server (child process, the packaged chat model), and the portal's
own clients in this process (`engine.llm`). Two arms, asked alternately on one event loop:

* **per call** (the baseline, what the client did before): a new `LLMClient` for every request,
  so a new httpx client (a new SSL context with the CA bundle loaded) and a new connection;
* **pooled**: one `LLMClient` kept, as `chat.llm.clients.llm_client` keeps it.

Each request is the same short chat turn answered with one token, so llama.cpp serves it from its
prompt cache and what is left is the client's own setup plus one decode step. `--gap` seconds pass
between requests (a kept connection lives `engine.llm.transport.KEEPALIVE_SECONDS`, 4 s: a longer gap shows
the pool without the kept connection). Also timed: one `/tokenize` count (the sync
`ServerTokenCounter`, which turn preparation calls for each text it has not counted yet), with a
fresh counter per call against one kept counter. Printed: hardware, then median and p95 of each
arm, the saving and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say yes."}]


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="requests per arm")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between requests")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    return parser.parse_args()


def _line(name: str, seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"  {name:<10} p50 {statistics.median(seconds) * 1000:7.2f} ms   p95 {p95 * 1000:7.2f} ms"


def _compare(title: str, baseline: list[float], pooled: list[float]) -> None:
    print(f"== {title} ({len(baseline)} each) ==")
    print(_line("per call", baseline))
    print(_line("pooled", pooled))
    saved = statistics.median(baseline) - statistics.median(pooled)
    print(f"  saving     p50 {saved * 1000:7.2f} ms   ratio pooled / per call "
          f"{statistics.median(pooled) / statistics.median(baseline):.2f}")


async def _first_token(client, settings) -> float:  # noqa: ANN001 - LLMClient, GenerationSettings (engine.llm)
    started = time.perf_counter()
    stream = client.stream_chat(MESSAGES, settings)
    async for chunk in stream:
        if chunk.delta:
            first = time.perf_counter() - started
            break
    else:
        raise RuntimeError("the server answered no text")
    async for _ in stream:  # the rest (finish reason, usage): the response is read whole
        pass
    return first


async def _time_first_tokens(base_url: str, runs: int, gap: float) -> tuple[list[float], list[float]]:
    from engine.llm.client import LLMClient
    from engine.llm.sampling import GenerationSettings

    settings = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=1)
    kept = LLMClient(base_url)
    baseline: list[float] = []
    pooled: list[float] = []
    await _first_token(kept, settings)  # warm: the prompt in llama.cpp's cache, the pool open
    for _ in range(runs):
        baseline.append(await _first_token(LLMClient(base_url), settings))
        await asyncio.sleep(gap)
        pooled.append(await _first_token(kept, settings))
        await asyncio.sleep(gap)
    return baseline, pooled


def _time_counts(base_url: str, runs: int, gap: float) -> tuple[list[float], list[float]]:
    from engine.llm.tokens import ServerTokenCounter

    kept = ServerTokenCounter(base_url)
    baseline: list[float] = []
    pooled: list[float] = []
    kept.count_tokens("warm up")
    for number in range(runs):
        text = f"A text never counted before, number {number}."  # not in either counter's cache
        started = time.perf_counter()
        ServerTokenCounter(base_url).count_tokens(text)
        baseline.append(time.perf_counter() - started)
        time.sleep(gap)
        started = time.perf_counter()
        kept.count_tokens(text)
        pooled.append(time.perf_counter() - started)
        time.sleep(gap)
    return baseline, pooled


def main() -> None:
    args = _parse()
    from engine.llama_server import LlamaServer
    from engine.model_files import default_chat_gguf_path

    print_hardware()
    print(f"== setup ==\n  runs {args.runs} per arm, gap {args.gap} s, llama.cpp threads {args.threads}")
    with LlamaServer(default_chat_gguf_path(), threads=args.threads, ctx_size=2048, parallel=1) as server:
        baseline, pooled = asyncio.run(_time_first_tokens(server.base_url, args.runs, args.gap))
        _compare("time to first token, one cached prompt", baseline, pooled)
        baseline, pooled = _time_counts(server.base_url, args.runs, args.gap)
        _compare("one /tokenize count (sync)", baseline, pooled)


if __name__ == "__main__":
    main()
