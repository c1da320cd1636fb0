"""Many users at once: each holds a conversation with think time; TTFT and where each turn's time goes.

    python -m bench.load [--set demo|manpages] [--users 1,2,4,8,16] [--turns 2] [--think 1-4]
                         [--policies fcfs,parallel] [--mode ws|openai] [--max-tokens 128]
                         [--floor together|separate|both|none] [--web-processes 2 [--shared-queue]]
                         [--meaning on|off] [--fixed-length]
    python -m bench.load --servers 2 --users 8 [--threads 2] [--parallel 8]   (bench.load_servers)

What runs: one real llama.cpp server (the packaged chat model, `--parallel` slots sharing one
16384-token KV cache, 2 threads) and the portal's web process as `./portal run` starts it (Uvicorn, a child
process, SQLite in a temporary DATA_DIR), on the corpus of `bench.answers`'s `--set` (the demo
corpus, or the 57 Linux manual pages: a larger one). For each policy of the queue into the LLM
(`chat.llm.queue`: `fcfs`, one prefill at a time, the default; `parallel`, every turn sent
at once as before it existed) and each user count, every user opens a fresh conversation and
asks `--turns` questions of the set over the real websocket (`--mode openai`: the official
`openai` client on the OpenAI-compatible endpoint, the history held by the client), all first
questions at once, then each after its own think time (seeded).

The floor, in the same run: the prompts the portal sent (rebuilt from what it stored: the history
before each turn and the memories that primed it, assembled by the same `engine.llm.prompt.assemble_prompt`)
sent straight to the same llama.cpp server with the same concurrency, pattern and think times.
The targets' floor (`--floor together`) sends the first turns, which every user sends at the same
moment, as one request (`/completion` with a list of prompts), so that they reach llama.cpp in one
scheduling step: "all prompts sent at once". Separate requests sent at once (`--floor separate`)
land in one step only when they beat the server's next step; one that loses is read alone first,
which makes that floor first come, first served by chance (seen both ways here). `both` runs and
prints both; the targets are judged against the first.

`--web-processes N` serves the portal from N web processes, each on its own port, user i on
process i mod N (a load balancer's round robin): each keeps its own queue of turns, or with
`--shared-queue` they share one in Redis (`LLM_QUEUE_REDIS_URL`, `chat.llm.queue_redis`).

`--meaning off` builds the corpus without the meaning channel (a new corpus has it on): two runs,
one each way, show what the channel costs a turn (issue 62: at most 10 % of TTFT at 4 users); each
run prints the corpus's meaning phase as built and the web process's peak RSS. `--fixed-length` runs
every answer to `--max-tokens` (llama.cpp's `--ignore-eos`): an answer's length then does not depend on
what it says, so the queue a turn meets is the same in both runs of a pair, and what is left of the
difference in time to first token is the channel's own (its retrieval and its prompt's size).

Printed per policy and user count: TTFT p50/p95 (at the client: sending the turn to its first
streamed text), the ratio to the floor's, time per output token, answers per minute, errors and
refusals; and, from the portal's own `chat.done` timings, where the time went (median seconds):
prepare (access, token counting, retrieval, prompt assembly; retrieval alone beside it), queue
(waiting for the LLM after that), prefill (admitted to the first token), generation.
Targets (issue 26): 1 user within 1.3x the floor; 2, 4 and 8 users p50 <= 0.8x and p95 <= 1.3x;
answers per minute at 8 users >= 90 % of the floor's; 16 users: every turn answered or refused
with the clear error, none lost, none stuck.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware, proc_status_kib  # noqa: E402
from bench.answers import DATA, SETS, build_corpus, percentile, portal_setup  # noqa: E402
from engine.llama_server import DEFAULT_CTX_SIZE, DEFAULT_PARALLEL  # noqa: E402

if TYPE_CHECKING:
    from engine.llm.client import LLMClient
    from engine.llm.sampling import GenerationSettings

STUCK_SECONDS = 600  # a turn without an end after this long is reported stuck


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("demo", "manpages", "jargon"), default="demo")
    parser.add_argument("--users", default="1,2,4,8,16", help="user counts, comma-separated")
    parser.add_argument("--turns", type=int, default=2, help="questions per user")
    parser.add_argument("--think", default="1-4", help="think time between a user's turns, seconds (MIN-MAX)")
    parser.add_argument("--policies", default="fcfs", help="fcfs (one prefill at a time), parallel, or both")
    parser.add_argument("--mode", choices=("ws", "openai"), default="ws")
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="answer cap (the engine's max_new_tokens)"
    )
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL,
                        help="llama.cpp slots (and the portal's LLM_STREAMS)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp compute threads")
    parser.add_argument("--batch", type=int, default=2048, help="llama.cpp prompt tokens per step (n_batch)")
    parser.add_argument(
        "--ctx-size", type=int, default=DEFAULT_CTX_SIZE, help="llama.cpp KV cache, shared by the slots"
    )
    parser.add_argument(
        "--floor",
        choices=("together", "separate", "both", "none"),
        default="both",
        help="llama.cpp alone: the burst as one request (lands in one step: the targets' floor), "
        "as separate requests, both, or none",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--web-nice", type=int, default=0, help="niceness of the web process")
    parser.add_argument(
        "--web-processes",
        type=int,
        default=1,
        help="web processes in front of the one llama.cpp, each on its own port; user i on process i mod N",
    )
    parser.add_argument(
        "--shared-queue",
        action="store_true",
        help="the web processes share one queue of turns in Redis (LLM_QUEUE_REDIS_URL=REDIS_URL, "
        "else the local Redis)",
    )
    parser.add_argument(
        "--meaning",
        choices=("on", "off"),
        default="on",
        help="build the corpus with the meaning channel (a new corpus's default) or without it; "
        "pair two runs to see what it costs a turn",
    )
    parser.add_argument(
        "--fixed-length",
        action="store_true",
        help="every answer runs to --max-tokens (llama.cpp's --ignore-eos): paired runs meet the same queue",
    )
    parser.add_argument("--verbose", action="store_true", help="print every turn beside its floor")
    parser.add_argument(
        "--servers",
        type=int,
        default=0,
        help="N llama.cpp servers of threads/N threads against one of --threads (bench.load_servers)",
    )
    return parser.parse_args()


@dataclass
class Turn:
    user: int
    number: int
    question: str
    sent: float = 0.0
    ttft: float | None = None
    total: float | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    status: str = ""
    error: str = ""
    timings: dict = field(default_factory=dict)
    request: list | None = None  # openai mode: the messages the client sent
    messages: list | None = None  # the prompt the portal sent llama.cpp (the floor's)

    @property
    def per_token(self) -> float | None:
        if (
            self.ttft is None
            or self.total is None
            or not self.completion_tokens
            or self.completion_tokens < 2
        ):
            return None
        return (self.total - self.ttft) / (self.completion_tokens - 1)


@dataclass
class Phase:
    name: str
    users: int
    turns: list[Turn]
    wall: float

    def answered(self) -> list[Turn]:
        return [t for t in self.turns if t.ttft is not None and not t.error]


def plan_turns(users: int, turns: int, questions: list[str], think: tuple[float, float], seed: int
               ) -> list[list[tuple[str, float]]]:
    """Per user: (question, think time before it) for each turn; the first turn has none."""
    rng = random.Random(seed * 1000 + users)
    return [[(rng.choice(questions), 0.0 if number == 0 else rng.uniform(*think)) for number in range(turns)]
            for _ in range(users)]


# ---------------------------------------------------------------- the portal


def print_meaning(corpus_id: int, asked: str) -> None:
    """The corpus's meaning phase as built (inline: eager Celery); a run that asked for the channel
    and did not get it stops here rather than measure the wrong thing."""
    from corpus.services.meaning_jobs import meaning_state

    state = meaning_state(corpus_id)
    print(f"meaning channel {asked}: {state['done']} of {state['total']} memories read by meaning")
    if (asked == "on") != bool(state["total"] and state["done"] == state["total"]):
        raise SystemExit(f"the corpus's meaning phase does not match --meaning {asked}: {state}")


def peak_rss_mib(pid: int) -> str:
    """A live process's peak resident memory (Linux /proc VmHWM) in MiB, or "?" elsewhere."""
    try:
        return f"{proc_status_kib('VmHWM', pid) / 1024:.0f}"
    except (OSError, RuntimeError):
        return "?"


def start_web(data_dir: Path, llm_url: str, policy: str, streams: int, nice: int = 0, queue_redis: str = "",
              name: str = "", env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """One web process of the portal (its own queue of turns, or with `queue_redis` the queue it
    shares with the others in that Redis; `env`: more of its settings); its log is
    `web-{policy}{name}.log`."""
    from engine.llama_server import free_port

    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "0",
        "LLM_BASE_URL": llm_url,
        "LLM_STREAMS": str(streams if policy == "fcfs" else 64),
        "LLM_PREFILL_AT_ONCE": "1" if policy == "fcfs" else "0",
        "LLM_QUEUE_LIMIT": "64",
        "LOG_LEVEL": "WARNING",
        "LLM_QUEUE_REDIS_URL": queue_redis,
        **(env or {}),
    }
    with open(data_dir / f"web-{policy}{name}.log", "ab") as log:
        web = subprocess.Popen(
            [
                "nice",
                "-n",
                str(nice),
                sys.executable,
                "-m",
                "uvicorn",
                "hdrag_site.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--ws-max-size",
                "1048576",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
            return web, f"127.0.0.1:{port}"
        except httpx.HTTPError:
            if web.poll() is not None:
                raise SystemExit(
                    f"the web process exited; see {data_dir / f'web-{policy}{name}.log'}"
                ) from None
            time.sleep(0.3)
    raise SystemExit("the web process did not start in 120 s")


def make_users(count: int, corpus_id: int, mode: str) -> list[dict]:
    """`count` users, each with a session cookie (ws) or an API token (openai) and a fresh conversation."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounts.services.tokens import api_token_create
    from chat.services import conversation_create
    from corpus.models import Corpus

    User = get_user_model()  # noqa: N806
    Corpus.objects.filter(pk=corpus_id).update(visibility="everyone")
    made = []
    for _ in range(count):
        user = User.objects.create_user(f"load-{User.objects.count()}", password="load-bench-pw")
        client = Client()
        client.force_login(user)
        conversation = conversation_create(user=user, corpus_ids=[corpus_id])
        made.append(
            {
                "user": user,
                "cookie": (
                    f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
                ),
                "conversation": conversation.pk,
                "token": api_token_create(user=user, name="load")[1] if mode == "openai" else "",
                "corpus": corpus_id,
            }
        )
    return made


async def ws_user(
    host: str, account: dict, plan: list[tuple[str, float]], index: int, turns: list[Turn]
) -> None:
    from websockets.asyncio.client import connect

    async with connect(
        f"ws://{host}/ws/chat/{account['conversation']}/",
        max_size=2**24,
        open_timeout=60,
        additional_headers={"Cookie": account["cookie"], "Origin": f"http://{host}"},
    ) as socket:
        json.loads(await socket.recv())  # chat.ready
        for number, (question, think) in enumerate(plan):
            await asyncio.sleep(think)
            turn = Turn(index, number, question, sent=time.perf_counter())
            turns.append(turn)
            await socket.send(json.dumps({"type": "chat.send", "content": question}))
            try:
                async with asyncio.timeout(STUCK_SECONDS):
                    while True:
                        event = json.loads(await socket.recv())
                        kind = event["type"]
                        if kind == "chat.delta" and turn.ttft is None:
                            turn.ttft = time.perf_counter() - turn.sent
                        elif kind in ("chat.done", "chat.error"):
                            turn.total = time.perf_counter() - turn.sent
                            turn.status = event.get("status") or event.get("code", "")
                            turn.error = event.get("error", "") if kind == "chat.error" else ""
                            turn.timings = event.get("timings") or {}
                            usage = event.get("usage") or {}
                            turn.completion_tokens = usage.get("completion_tokens")
                            turn.prompt_tokens = usage.get("prompt_tokens")
                            break
            except TimeoutError:
                turn.status, turn.error = "stuck", f"no end after {STUCK_SECONDS} s"
                return


async def openai_user(
    host: str, account: dict, plan: list[tuple[str, float]], index: int, turns: list[Turn]
) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=f"http://{host}/api/v1", api_key=account["token"], max_retries=0,
                                timeout=STUCK_SECONDS)
    history: list[dict] = []
    for number, (question, think) in enumerate(plan):
        await asyncio.sleep(think)
        turn = Turn(index, number, question, sent=time.perf_counter())
        turns.append(turn)
        history.append({"role": "user", "content": question})
        turn.request = [dict(message) for message in history]
        parts: list[str] = []
        try:
            stream = await client.chat.completions.create(
                model=f"corpus-{account['corpus']}",
                messages=history,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if turn.ttft is None:
                        turn.ttft = time.perf_counter() - turn.sent
                    parts.append(chunk.choices[0].delta.content)
                if chunk.usage:
                    turn.completion_tokens = chunk.usage.completion_tokens
            turn.status = "complete"
        except openai.APIStatusError as error:
            turn.status, turn.error = str(error.status_code), str(error.message)[:200]
        except openai.APIError as error:
            turn.status, turn.error = "error", str(error)[:200]
        turn.total = time.perf_counter() - turn.sent
        history.append({"role": "assistant", "content": "".join(parts)})


def portal_prompts(accounts: list[dict], turns: list[Turn], mode: str) -> None:
    """Each turn's prompt as the portal sent it: ws, rebuilt from the stored history and memories;
    openai, prepared again by the endpoint's own `completion_prepare` on the same messages."""
    from chat.completions import completion_corpus, completion_prepare
    from chat.llm import clients
    from chat.models import Message
    from chat.selectors import conversation_history
    from core import runtime
    from engine.llm.prompt import assemble_prompt

    config, budget, counter = runtime.engine_config(), clients.context_budget(), clients.token_counter()
    for turn in turns:
        account = accounts[turn.user]
        if mode == "openai":
            corpus = completion_corpus(user=account["user"], model=f"corpus-{account['corpus']}")
            prepared = completion_prepare(user=account["user"], corpus=corpus, messages=turn.request)
            turn.messages = prepared.plan.messages
            continue
        users = list(
            Message.objects.filter(conversation_id=account["conversation"], role="user").order_by("id")
        )
        if turn.number >= len(users):
            continue
        user_message = users[turn.number]
        answer = Message.objects.filter(conversation_id=account["conversation"], role="assistant",
                                        id__gt=user_message.pk).order_by("id").first()
        texts = (
            [m.memory.text for m in answer.memories.select_related("memory").order_by("rank") if m.memory]
            if answer
            else []
        )
        plan = assemble_prompt(
            system_prompt=config.system_prompt,
            memories=texts,
            tokenizer=counter,
            budget=budget,
            history=conversation_history(conversation_id=account["conversation"], before_id=user_message.pk),
            user_message=user_message.content,
        )
        turn.messages = plan.messages


async def burst_together(
    client: LLMClient,
    sources: list[Turn],
    settings: GenerationSettings,
    turns: list[Turn],
    ended: dict[int, asyncio.Event],
) -> None:
    """The first turns of every user as ONE request to llama.cpp (`/completion` with a list of
    prompts, each rendered by the server's own chat template): its tasks reach the server's queue
    together, so they land in one scheduling step whatever the client's timing. Separate requests
    sent "at once" land together only when they beat the server's next step; one that does not is
    read alone first (seen both ways on this machine), which makes the floor first come, first
    served by chance. TTFT per prompt: from sending the request to that prompt's first text. The
    sampling is the client's own request's (`LLMClient.payload`; llama.cpp's `/completion` reads the
    same fields, `max_tokens` as `n_predict`)."""
    import httpx

    from engine.llm.stream import sse_lines

    llm_url = client.base_url
    async with httpx.AsyncClient(timeout=STUCK_SECONDS) as http:
        prompts = []
        for source in sources:
            rendered = await http.post(f"{llm_url}/apply-template", json={"messages": source.messages})
            rendered.raise_for_status()
            prompts.append(rendered.json()["prompt"])
        sampling = {
            key: value
            for key, value in client.payload([], settings).items()
            if key not in ("model", "messages")
        }
        body = {**sampling, "prompt": prompts, "cache_prompt": True}
        sent = time.perf_counter()
        mine = [Turn(source.user, source.number, source.question, sent=sent) for source in sources]
        turns.extend(mine)
        try:
            async with http.stream("POST", f"{llm_url}/completion", json=body) as response:
                response.raise_for_status()
                async for line in sse_lines(response.aiter_text()):
                    data = line.removeprefix("data: ").strip()
                    if not line.startswith("data: ") or not data.startswith("{"):
                        continue
                    event = json.loads(data)
                    turn = mine[event.get("index", 0)]
                    if event.get("content") and turn.ttft is None:
                        turn.ttft = time.perf_counter() - sent
                    if event.get("stop"):
                        turn.total = time.perf_counter() - sent
                        turn.completion_tokens = event.get("tokens_predicted")
                        turn.prompt_tokens = event.get("tokens_evaluated")
                        turn.status = "complete"
                        ended[turn.user].set()
        except httpx.HTTPError as error:
            for turn in mine:
                if turn.status != "complete":
                    turn.status, turn.error = "error", str(error)[:200]
        finally:
            for turn in mine:
                ended[turn.user].set()


async def floor_phase(
    llm_url: str, portal: Phase, plans: list[list[tuple[str, float]]], together: bool
) -> Phase:
    """The portal phase's prompts straight to llama.cpp: same users, order and think times; with
    `together`, the turns every user sends at the start (a burst) go as one request."""
    from chat.llm import clients
    from engine.llm.client import LLMClient
    from engine.llm.errors import LLMError

    client = LLMClient(llm_url, timeout=STUCK_SECONDS)
    settings = clients.generation_settings()
    by_user: dict[int, list[Turn]] = {}
    for turn in sorted(portal.turns, key=lambda t: (t.user, t.number)):
        by_user.setdefault(turn.user, []).append(turn)
    turns: list[Turn] = []
    burst = [ts[0] for ts in by_user.values() if ts and ts[0].number == 0 and ts[0].messages is not None] \
        if together else []
    ended = {turn.user: asyncio.Event() for turn in burst}

    async def user(index: int) -> None:
        for source, (_, think) in zip(by_user.get(index, []), plans[index], strict=False):
            await asyncio.sleep(think)
            if source in burst:
                await ended[index].wait()  # the user reads its answer before the next question
                continue
            if source.messages is None:
                continue
            turn = Turn(index, source.number, source.question, sent=time.perf_counter())
            turns.append(turn)
            try:
                async for chunk in client.stream_chat(source.messages, settings):
                    if chunk.delta and turn.ttft is None:
                        turn.ttft = time.perf_counter() - turn.sent
                    if chunk.usage:
                        turn.completion_tokens = chunk.usage.completion_tokens
                        turn.prompt_tokens = chunk.usage.prompt_tokens
                turn.status = "complete"
            except LLMError as error:
                turn.status, turn.error = "error", str(error)[:200]
            turn.total = time.perf_counter() - turn.sent

    started = time.perf_counter()
    tasks = [user(index) for index in range(portal.users)]
    if burst:
        tasks.append(burst_together(client, burst, settings, turns, ended))
    await asyncio.gather(*tasks)
    return Phase("floor" if together else "floor-sep", portal.users, turns, time.perf_counter() - started)


async def portal_phase(
    name: str, hosts: list[str], accounts: list[dict], plans: list[list[tuple[str, float]]], mode: str
) -> Phase:
    """Every user's turns, user i on web process i mod len(hosts) (a load balancer's round robin)."""
    turns: list[Turn] = []
    run_user = ws_user if mode == "ws" else openai_user
    started = time.perf_counter()
    await asyncio.gather(*(run_user(hosts[index % len(hosts)], account, plan, index, turns)
                           for index, (account, plan) in enumerate(zip(accounts, plans, strict=True))))
    return Phase(name, len(accounts), turns, time.perf_counter() - started)


# ---------------------------------------------------------------- report


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def line(phase: Phase, floor: Phase | None) -> dict:
    answered = phase.answered()
    ttfts = [t.ttft for t in answered]
    p50, p95 = (statistics.median(ttfts), percentile(ttfts, 0.95)) if ttfts else (None, None)
    refused = sum(1 for t in phase.turns if t.status in ("llm_busy", "429"))
    lost = sum(1 for t in phase.turns if t.status == "stuck" or (t.ttft is None and not t.error))
    row = {"name": phase.name, "users": phase.users, "turns": len(phase.turns), "answered": len(answered),
           "p50": p50, "p95": p95, "per_token": _median([t.per_token for t in answered if t.per_token]),
           "per_minute": len(answered) / phase.wall * 60 if phase.wall else 0.0,
           "errors": sum(1 for t in phase.turns if t.error) - refused, "refused": refused, "lost": lost}
    if floor is not None and floor.answered():
        f50 = statistics.median([t.ttft for t in floor.answered()])
        f95 = percentile([t.ttft for t in floor.answered()], 0.95)
        row["ratio"] = (p50 / f50 if p50 and f50 else None, p95 / f95 if p95 and f95 else None)
        row["per_minute_ratio"] = row["per_minute"] / (len(floor.answered()) / floor.wall * 60)
    return row


def print_row(row: dict) -> None:
    ratio = row.get("ratio")
    ratio_text = f"{_s(ratio[0])}x / {_s(ratio[1])}x" if ratio else ""
    per_minute = f"{row['per_minute']:.1f}" + (
        f" ({row['per_minute_ratio']:.0%})" if "per_minute_ratio" in row else ""
    )
    print(f"  {row['name']:<9} {row['users']:>3} users  {row['answered']:>3}/{row['turns']:<3} answered  "
          f"TTFT p50 {_s(row['p50'], 1):>6} s  p95 {_s(row['p95'], 1):>6} s  {ratio_text:<16} "
          f"{_s(row['per_token'] and row['per_token'] * 1000, 0):>5} ms/token  {per_minute} answers/min  "
          f"errors {row['errors']}  refused {row['refused']}  lost {row['lost']}")
    if row.get("ratio_separate"):
        separate = row["ratio_separate"]
        print(f"            against the floor of separate requests: {_s(separate[0])}x / {_s(separate[1])}x")


def print_breakdown(phase: Phase) -> None:
    timed = [t.timings for t in phase.answered() if t.timings]
    if not timed:
        return
    parts = {name: _median([(t.get(name) or 0) / 1000 for t in timed])
             for name in ("prepare", "retrieval", "queue", "prefill", "generation")}
    transport = _median(
        [t.ttft - (t.timings.get("first_token") or 0) / 1000 for t in phase.answered() if t.timings]
    )
    prompts = [t.prompt_tokens for t in phase.answered() if t.prompt_tokens]
    print(
        f"            where the time went (median s): prepare {_s(parts['prepare'])} (retrieval "
        f"{_s(parts['retrieval'], 3)}), queue {_s(parts['queue'])}, prefill {_s(parts['prefill'])}, "
        f"generation {_s(parts['generation'])}; client-side beyond the server's first token "
        f"{_s(transport, 3)}; prompt tokens median {_median(prompts) if prompts else '-'}"
    )


def warm_up(host: str, account: dict, questions: list[str]) -> None:
    """Searches in the web process before measuring (a running portal has mapped its builds and
    compiled its kernels); they touch no LLM cache."""
    import httpx

    with httpx.Client(headers={"Cookie": account["cookie"]}, timeout=120) as http:
        for question in questions[:3]:
            http.get(f"http://{host}/memory/search/", params={"q": question}).raise_for_status()


def print_turns(phase: Phase, floor: Phase) -> None:
    floors = {(t.user, t.number): t for t in floor.turns}
    for turn in sorted(phase.turns, key=lambda t: (t.sent, t.user)):
        other = floors.get((turn.user, turn.number))
        t = turn.timings
        print(
            f"            user {turn.user} turn {turn.number}: TTFT {_s(turn.ttft)} s (prepare "
            f"{_s((t.get('prepare') or 0) / 1000)}, queue {_s((t.get('queue') or 0) / 1000)}, prefill "
            f"{_s((t.get('prefill') or 0) / 1000)}), prompt {turn.prompt_tokens}, answer "
            f"{turn.completion_tokens}"
            f" | floor TTFT {_s(other.ttft if other else None)} s, prompt "
            f"{other.prompt_tokens if other else '-'}"
        )


def main() -> int:
    args = _parse()
    print_hardware()
    if args.servers:
        from bench.load_servers import main_servers

        return main_servers(args)
    from engine.llama_server import LlamaServer, free_port
    from engine.model_files import default_chat_gguf_path

    user_counts = [int(n) for n in args.users.split(",")]
    policies = ["fcfs", "parallel"] if args.policies == "both" else args.policies.split(",")
    think = tuple(float(x) for x in args.think.split("-"))
    source, _, make_corpus = SETS[args.set]
    questions = [question for question, _ in json.loads((DATA / source).read_text(encoding="utf-8"))]
    gguf = default_chat_gguf_path()
    port = free_port()

    def llm() -> LlamaServer:
        # A fresh server for every phase: nothing one phase prefilled is in another's prompt cache.
        return LlamaServer(
            gguf,
            port=port,
            threads=args.threads,
            ctx_size=args.ctx_size,
            parallel=args.parallel,
            batch=args.batch,
            ignore_eos=args.fixed_length,
        )

    llm_url = f"http://127.0.0.1:{port}"
    queue_redis = (os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") if args.shared_queue else ""
    with tempfile.TemporaryDirectory(prefix="bench-load-") as data_dir:
        print(
            f"set {args.set}; chat model {gguf.name} on llama.cpp ({args.parallel} slots, {args.threads} "
            f"threads, batch {args.batch}, KV cache {args.ctx_size}, "
            f"a fresh server per phase); mode {args.mode}; {args.turns} turns per user, think {args.think} "
            f"s; answers {'of exactly' if args.fixed_length else 'up to'} {args.max_tokens} tokens; "
            f"policies {', '.join(policies)}; users {args.users}; "
            f"{args.web_processes} web process{'es' if args.web_processes > 1 else ''}"
            + (f", one queue in Redis {queue_redis}" if queue_redis else ", a queue in each")
        )
        os.environ["MEANING_CHANNEL_DEFAULT"] = "1" if args.meaning == "on" else "0"
        os.environ["BENCH_MEANING"] = os.environ["MEANING_CHANNEL_DEFAULT"]
        portal_setup(Path(data_dir), llm_url, args.max_tokens)
        _, corpus_id = build_corpus(make_corpus)
        print_meaning(corpus_id, args.meaning)
        results: list[dict] = []
        for policy in policies:
            webs = [
                start_web(
                    Path(data_dir),
                    llm_url,
                    policy,
                    args.parallel,
                    args.web_nice,
                    queue_redis,
                    f"-{number}" if args.web_processes > 1 else "",
                )
                for number in range(args.web_processes)
            ]
            hosts = [host for _, host in webs]
            try:
                print(f"\n== policy {policy} ==")
                for users in user_counts:
                    accounts = make_users(users, corpus_id, args.mode)
                    try:
                        warm = accounts[0] if args.mode == "ws" else make_users(1, corpus_id, "ws")[0]
                        for host in hosts:
                            warm_up(host, warm, questions)
                    except Exception:
                        for log in sorted(Path(data_dir).glob(f"web-{policy}*.log")):
                            print(log.read_text()[-3000:])
                        raise
                    plans = plan_turns(users, args.turns, questions, think, args.seed)
                    with llm():
                        phase = asyncio.run(portal_phase(policy, hosts, accounts, plans, args.mode))
                    floors: dict[str, Phase] = {}
                    for number, together in enumerate({"together": [True], "separate": [False],
                                                       "both": [True, False], "none": []}[args.floor]):
                        with llm():
                            if number == 0:  # counted by the served model's own tokenizer, as the portal did
                                portal_prompts(accounts, phase.turns, args.mode)
                            floor = asyncio.run(floor_phase(llm_url, phase, plans, together))
                        floors[floor.name] = floor
                        print_row(line(floor, None))
                    floor = floors.get("floor") or floors.get("floor-sep")
                    row = line(phase, floor)
                    if "floor" in floors and "floor-sep" in floors:
                        row["ratio_separate"] = line(phase, floors["floor-sep"]).get("ratio")
                    results.append(row)
                    print_row(row)
                    print_breakdown(phase)
                    if args.verbose and floor is not None:
                        print_turns(phase, floor)
                    for turn in phase.turns:
                        if turn.error and turn.status not in ("llm_busy", "429"):
                            print(
                                f"            error: user {turn.user} turn {turn.number}: {turn.error[:160]}"
                            )
            finally:
                for web, _ in webs:
                    rss = peak_rss_mib(web.pid)
                    print(f"web process {web.pid}: peak RSS {rss} MiB (meaning {args.meaning})")
                    web.terminate()
                for web, _ in webs:
                    web.wait(timeout=30)
        print("\n== targets (issue 26) ==")
        for row in results:
            ratio = row.get("ratio")
            if not ratio or ratio[0] is None:
                continue
            if row["users"] == 1:
                verdict = ratio[0] <= 1.3
                target = "p50 <= 1.3x the floor"
            elif row["users"] <= 8:
                verdict = ratio[0] <= 0.8 and ratio[1] <= 1.3
                target = "p50 <= 0.8x, p95 <= 1.3x the floor"
            else:
                verdict = row["lost"] == 0
                target = "none lost or stuck"
            print(f"  {row['name']:<9} {row['users']:>3} users: {target}: {'met' if verdict else 'NOT met'} "
                  f"({_s(ratio[0])}x / {_s(ratio[1])}x, lost {row['lost']})")
            if row["users"] == 8 and "per_minute_ratio" in row:
                print(
                    f"  {row['name']:<9}   8 users: answers/min >= 90 % of the floor's: "
                    f"{'met' if row['per_minute_ratio'] >= 0.9 else 'NOT met'} "
                    f"({row['per_minute_ratio']:.0%})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
