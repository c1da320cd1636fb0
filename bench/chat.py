"""Chat latency: time to first token (retrieval included) and tokens/s over the real websocket path.

    python -m bench.chat [--memories 100000] [--concurrent 8] [--max-tokens 48] [--runs 3]

What runs: the portal's ASGI app in this process (session auth, consumer, `chat.turns`, memory
search, SQLite), talking to one real llama.cpp server (child process, the packaged chat model) over
HTTP. The corpus's index is built from Gemma 3 270M's token embeddings, as new corpora are.
The clients are channels' WebsocketCommunicator on that same app.

The corpus is built once with the real pipeline (tokenize, project Gemma's embeddings, encode,
index) and cached under `.cache/bench/`; its documents are synthetic: each joins three random
sentences of Python's documentation topics (seeded), so 100,000 distinct memories exist without
a 100,000-document download.

Printed: hardware; retrieval alone (memory search as the consumer calls it); one chat with memory
off (the baseline: same path, no retrieval) and on; then `--concurrent` chats at once. TTFT is
measured at the client, from sending the turn to the first streamed delta; retrieval's share is
the consumer's own retrieval time divided by that TTFT. Target: retrieval adds <= 30 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware  # noqa: E402

QUESTIONS = [
    "How does a generator function pause at yield and resume later?",
    "What happens when an exception is raised inside a try block with a finally clause?",
    "How are format specifications with width and precision written in strings?",
    "Explain how class inheritance resolves method lookups.",
    "What does the with statement do with context managers?",
    "How do default argument values behave when they are mutable?",
    "What is the difference between a list comprehension and a generator expression?",
    "How are names resolved in nested functions and closures?",
    "How does the import system find and load a module?",
    "What do the comparison operators do when comparing sequences?",
    "How does slicing work with negative indices and steps?",
    "What are decorators and how are they applied to functions?",
]


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000, help="documents in the synthetic corpus")
    parser.add_argument("--concurrent", type=int, default=8, help="chats at once in the concurrent phase")
    parser.add_argument("--max-tokens", type=int, default=48, help="max_new_tokens per answer")
    parser.add_argument("--token-budget", type=int, default=512, help="memory tokens per answer")
    parser.add_argument("--runs", type=int, default=3, help="single-chat repetitions per mode")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp compute threads")
    parser.add_argument(
        "--ctx-size", type=int, default=16384, help="llama.cpp KV cache (shared by all slots)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _sentences() -> list[str]:
    from pydoc_data.topics import topics

    found = {s.strip() for text in topics.values()
             for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if len(s.split()) >= 6}
    return sorted(found)


def corpus_build(memories: int, seed: int, gguf_path: Path) -> tuple[Path, Path, Path]:
    """(build dir, records file, dataset file), built once per (memories, seed) and cached."""
    from engine.build import build_index
    from engine.config import Config
    from engine.spm import GGUFTokenizer

    root = REPO / ".cache" / "bench" / f"chat-corpus-{memories}-{seed}"
    build_dir, records_file, dataset = root / "build", root / "records.jsonl", root / "dataset.jsonl"
    if (build_dir / "manifest.json").exists() and records_file.exists():
        return build_dir, records_file, dataset
    root.mkdir(parents=True, exist_ok=True)
    for stale in (build_dir, records_file):
        if stale.exists():
            import shutil

            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    rng = random.Random(seed)
    sentences = _sentences()
    with open(dataset, "w", encoding="utf-8") as handle:
        for number in range(memories):
            handle.write(json.dumps({"text": f"{' '.join(rng.sample(sentences, 3))} (note {number})"}) + "\n")
    started = time.perf_counter()
    with open(records_file, "w", encoding="utf-8") as out:
        def sink(records: list[dict]) -> None:
            out.writelines(json.dumps(r) + "\n" for r in records)
        build_index(datasets=[(1, "synthetic-pydoc.jsonl", dataset)], out_dir=build_dir, gguf_path=gguf_path,
                    tokenizer=GGUFTokenizer.from_gguf(gguf_path), config=Config(), sink=sink,
                    cache_dir=REPO / ".cache" / "embeddings")
    print(f"built the {memories:,}-memory corpus in {time.perf_counter() - started:.1f} s (cached in {root})")
    return build_dir, records_file, dataset


def portal_setup(args: argparse.Namespace, data_dir: Path, base_url: str) -> None:
    import yaml

    config_file = data_dir / "engine.yaml"
    config_file.write_text(yaml.safe_dump({"max_new_tokens": args.max_tokens, "llama_context_size": 4096}))
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "DATA_DIR": str(data_dir),
            "LLM_BASE_URL": base_url,
            "HDRAG_CONFIG_FILE": str(config_file),
            "LOG_LEVEL": "WARNING",
        }
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def corpus_rows(build_dir: Path, records_file: Path, dataset: Path, gguf_path: Path, users: list) -> int:
    """The corpus, its dataset (source id 1) and its memory rows, as a finished build would leave them."""
    from corpus.build_parameters import BuildParameters
    from corpus.memory_rows import MemoryWriter
    from corpus.models import Dataset, IndexBuild
    from corpus.services.corpora import corpus_create

    corpus = corpus_create(owner=users[0], name="synthetic", visibility="everyone")
    Dataset.objects.create(pk=1, corpus=corpus, name="synthetic-pydoc.jsonl", file=str(dataset),
                           size=dataset.stat().st_size, sha256="0" * 64, format="jsonl")
    build = IndexBuild.objects.create(
        corpus=corpus,
        status=IndexBuild.Status.SUCCEEDED,
        build_dir=str(build_dir),
        parameters=BuildParameters(
            gguf_path=str(gguf_path), hdc_dimensions=10000, hdc_seed=42, hdc_ngram=5
        ).to_json(),
    )
    writer = MemoryWriter(build=build, dataset_ids=[1])
    with open(records_file, encoding="utf-8") as handle:
        batch = []
        for line in handle:
            batch.append(json.loads(line))
            if len(batch) == 10000:
                writer.add(batch)
                batch = []
        writer.add(batch)
    writer.flush()
    corpus.active_build = build
    corpus.save(update_fields=["active_build"])
    return corpus.pk


async def _socket(user, conversation_id: int):  # noqa: ANN001, ANN202 - Django user, WebsocketCommunicator
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.test import Client

    from hdrag_site.asgi import application

    def cookie() -> str:
        client = Client()
        client.force_login(user)
        return client.cookies[settings.SESSION_COOKIE_NAME].value

    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={await database_sync_to_async(cookie)()}".encode()),
    ]
    socket = WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)
    connected, code = await socket.connect(timeout=30)
    if not connected:
        raise RuntimeError(f"websocket refused with code {code}")
    await socket.receive_json_from(timeout=30)
    return socket


async def one_chat(user, conversation_id: int, question: str) -> dict:  # noqa: ANN001 - Django user
    """Send one turn; TTFT and generation rate as the client sees them."""
    socket = await _socket(user, conversation_id)
    started = time.perf_counter()
    await socket.send_json_to({"type": "chat.send", "content": question})
    first = None
    retrieval_ms = 0.0
    while True:
        event = await socket.receive_json_from(timeout=600)
        if event["type"] == "chat.memories":
            retrieval_ms = event["retrieval_ms"]
        elif event["type"] == "chat.delta" and first is None:
            first = time.perf_counter()
        elif event["type"] in ("chat.done", "chat.error"):
            break
    finished = time.perf_counter()
    await socket.disconnect()
    if event["type"] == "chat.error":
        raise RuntimeError(f"chat failed: {event['error']}")
    tokens = event["usage"]["completion_tokens"] if event["usage"] else 0
    first = first or finished
    return {"ttft_ms": (first - started) * 1000, "retrieval_ms": retrieval_ms, "tokens": tokens,
            "prompt_tokens": event["usage"]["prompt_tokens"] if event["usage"] else 0,
            "tokens_per_s": (tokens - 1) / (finished - first) if tokens > 1 and finished > first else 0.0,
            "seconds": finished - started}


def _summary(name: str, results: list[dict]) -> None:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)
    ttft, retrieval = med("ttft_ms"), med("retrieval_ms")
    print(
        f"{name:<28} n={len(results):<3} TTFT median {ttft:8.1f} ms   retrieval {retrieval:6.1f} ms "
        f"({100 * retrieval / ttft if ttft else 0:4.1f} % of TTFT)   prompt {med('prompt_tokens'):6.0f} "
        f"tok   {med('tokens_per_s'):6.1f} tok/s per chat"
    )


def _median_ms(func, items) -> float:  # noqa: ANN001 - any callable of one item
    times = []
    for item in items:
        started = time.perf_counter()
        func(item)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def retrieval_breakdown(args: argparse.Namespace, user, corpus_id: int) -> None:  # noqa: ANN001 - Django user
    """Where retrieval time goes: the index scan (pruned vs the exact full scan, the baseline),
    the engine's whole pipeline, and the portal's memory search (access control, SQL rows)."""
    from core.runtime import default_gguf, engine_config
    from corpus.memory_rows import BuildMemoryStore
    from corpus.models import Corpus
    from corpus.serving import loaded_build, tokenizer_for
    from engine.retrieval import Retriever, SearchTarget
    from memory.services import memories_search

    corpus = Corpus.objects.select_related("active_build").get(pk=corpus_id)
    loaded = loaded_build(corpus.active_build.build_dir)
    retriever = Retriever(tokenizer_for(default_gguf()), engine_config())
    target = SearchTarget(loaded, BuildMemoryStore(corpus.active_build_id), corpus.name)
    vectors = {q: retriever.query_vector(loaded, q) for q in QUESTIONS}
    memories_search(user=user, corpus_ids=[corpus_id], query="warm-up", token_budget=args.token_budget)
    rows = {
        "encode query (cached text)": _median_ms(lambda q: retriever.query_vector(loaded, q), QUESTIONS),
        f"index exact full scan, top {retriever.candidates} (baseline)":
            _median_ms(lambda q: loaded.index.search_exact(*vectors[q], retriever.candidates), QUESTIONS),
        f"index pruned search, top {retriever.candidates}":
            _median_ms(lambda q: loaded.index.search(*vectors[q], retriever.candidates), QUESTIONS),
        "engine Retriever.search (SQL store)":
            _median_ms(lambda q: retriever.search(q, [target], token_budget=args.token_budget), QUESTIONS),
        "portal memories_search (as chat calls it)":
            _median_ms(lambda q: memories_search(user=user, corpus_ids=[corpus_id], query=q,
                                                 token_budget=args.token_budget), QUESTIONS),
    }
    for name, value in rows.items():
        print(f"{name:<48} {value:7.2f} ms")
    exact = rows[f"index exact full scan, top {retriever.candidates} (baseline)"]
    pruned = rows[f"index pruned search, top {retriever.candidates}"]
    print(f"pruned / exact scan: {pruned / exact:.2f}x over {args.memories:,} memories")


async def run(args: argparse.Namespace, users: list, corpus_id: int) -> None:
    from channels.db import database_sync_to_async

    from chat.services import conversation_create

    def new_conversation(user, use_memory: bool) -> int:  # noqa: ANN001 - Django user
        return conversation_create(user=user, corpus_ids=[corpus_id], use_memory=use_memory,
                                   token_budget=args.token_budget).pk

    create = database_sync_to_async(new_conversation)

    print(f"\n== retrieval alone (warm; median of {len(QUESTIONS)} queries) ==")
    await database_sync_to_async(retrieval_breakdown)(args, users[0], corpus_id)

    print("\n== one chat at a time ==")
    await one_chat(users[0], await create(users[0], False), "Hello!")  # warm the server and the socket path
    single: dict[str, list[dict]] = {"memory off (baseline)": [], "memory on": []}
    for number in range(args.runs):
        for mode, use_memory in (("memory off (baseline)", False), ("memory on", True)):
            question = QUESTIONS[number % len(QUESTIONS)]
            single[mode].append(await one_chat(users[0], await create(users[0], use_memory), question))
    for mode, results in single.items():
        _summary(mode, results)
    off = statistics.median(r["ttft_ms"] for r in single["memory off (baseline)"])
    on = statistics.median(r["ttft_ms"] for r in single["memory on"])
    retrieval = statistics.median(r["retrieval_ms"] for r in single["memory on"])
    print(f"TTFT with memory / without: {on / off:.2f}x (+{on - off:.1f} ms: retrieval {retrieval:.1f} ms, "
          f"the rest is prefill of the memories in the prompt)")

    print(f"\n== {args.concurrent} chats at once (memory on) ==")
    conversations = [await create(users[i % len(users)], True) for i in range(args.concurrent)]
    started = time.perf_counter()
    results = await asyncio.gather(*(one_chat(users[i % len(users)], conversations[i],
                                              QUESTIONS[(i + 3) % len(QUESTIONS)])
                                     for i in range(args.concurrent)))
    wall = time.perf_counter() - started
    _summary(f"{args.concurrent} concurrent", results)
    total = sum(r["tokens"] for r in results)
    print(f"aggregate: {total} tokens in {wall:.2f} s = {total / wall:.1f} tok/s; "
          f"TTFT max {max(r['ttft_ms'] for r in results):.1f} ms")

    verdict = "meets" if retrieval <= 30 else "MISSES"
    print(f"\ntarget: retrieval adds <= 30 ms to TTFT on {args.memories:,} memories -> single chat "
          f"{retrieval:.1f} ms ({verdict} the target)")


def main() -> int:
    args = _parse()
    print_hardware()
    from engine.llama_server import LlamaServer
    from engine.model_files import default_chat_gguf_path, default_gguf_path

    gguf_path = default_gguf_path()
    build_dir, records_file, dataset = corpus_build(args.memories, args.seed, gguf_path)
    with tempfile.TemporaryDirectory(prefix="bench-chat-") as data_dir, \
            LlamaServer(default_chat_gguf_path(), threads=args.threads, ctx_size=args.ctx_size,
                        parallel=max(args.concurrent, 1)) as server:
        print(
            f"llama.cpp server: {server.base_url}, {args.threads} threads, {max(args.concurrent, 1)} slots, "
            f"ctx {args.ctx_size}; answers up to {args.max_tokens} tokens, memory budget {args.token_budget}"
        )
        portal_setup(args, Path(data_dir), server.base_url)
        from django.contrib.auth import get_user_model

        users = [get_user_model().objects.create_user(f"bench-{i}") for i in range(max(args.concurrent, 1))]
        started = time.perf_counter()
        corpus_id = corpus_rows(build_dir, records_file, dataset, gguf_path, users)
        print(f"{args.memories:,} memory rows inserted in {time.perf_counter() - started:.1f} s")
        asyncio.run(run(args, users, corpus_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
