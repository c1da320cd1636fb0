"""The process's LLM side of a chat turn: the clients and token counters of its LLM servers, its
queue of turns, the prompt's budgets and sampling, and the threads a turn's retrieval runs on.
Each cache is bounded (`core.cache`); `core.runtime.reset()` empties them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

from chat.llm.queue import LLMQueue, TurnQueue
from chat.llm.queue_redis import RedisLLMQueue
from chat.llm.servers import LLMServer, ServerPool, servers_parse
from chat.llm.servers_redis import SharedServerPool
from core.cache import BoundedCache
from core.runtime import engine_config
from engine.llm.client import LLMClient
from engine.llm.prompt import ContextBudget, TokenCounter
from engine.llm.sampling import GenerationSettings
from engine.llm.tokens import ServerTokenCounter

TOKEN_COUNTERS = 8  # one per LLM server (URL and key)
LLM_CLIENTS = 4  # one per LLM server URL and timeout
RETRIEVAL_THREADS = 2

_counters: BoundedCache[tuple[str, str], ServerTokenCounter] = BoundedCache(TOKEN_COUNTERS)
_clients: BoundedCache[tuple[str, float, str, str], LLMClient] = BoundedCache(LLM_CLIENTS)
_queues: BoundedCache[tuple[str, int, int, int, int, str], TurnQueue] = BoundedCache(LLM_CLIENTS)
_pools: BoundedCache[tuple, ServerPool] = BoundedCache(2)
_executor_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def llm_client() -> LLMClient:
    """The client for the configured server (`LLM_BASE_URL`), kept: its pooled HTTP client (one per
    event loop) is made once, not per request, and it remembers what it has learnt of the server
    (whether it continues an answer)."""
    return llm_client_for(LLMServer(url=settings.LLM_BASE_URL.rstrip("/"), key=settings.LLM_API_KEY,
                                    model=settings.LLM_MODEL, slots=settings.LLM_STREAMS))


def llm_client_for(server: LLMServer) -> LLMClient:
    """The kept client of one server of the pool (`server_pool`)."""
    url, timeout, key, model = server.url, float(settings.LLM_TIMEOUT_SECONDS), server.key, server.model
    return _clients.get(
        (url, timeout, key, model), lambda: LLMClient(url, timeout=timeout, api_key=key, model=model)
    )


def llm_servers() -> list[LLMServer]:
    """`LLM_SERVERS`, or the one server `LLM_BASE_URL` (with `LLM_API_KEY`, `LLM_MODEL`, `LLM_STREAMS`
    slots)."""
    if settings.LLM_SERVERS:
        return servers_parse(
            settings.LLM_SERVERS, default_model=settings.LLM_MODEL, default_slots=settings.LLM_STREAMS
        )
    return [
        LLMServer(
            url=settings.LLM_BASE_URL.rstrip("/"),
            key=settings.LLM_API_KEY,
            model=settings.LLM_MODEL,
            slots=settings.LLM_STREAMS,
        )
    ]


def server_pool() -> ServerPool:
    """The process's pool of LLM servers (`chat.llm.servers`), one per setting of them; several servers
    behind the queue in Redis share their slots with every process (`chat.llm.servers_redis`)."""
    key = (
        settings.LLM_SERVERS,
        settings.LLM_BASE_URL,
        settings.LLM_API_KEY,
        settings.LLM_MODEL,
        settings.LLM_STREAMS,
    )
    if settings.LLM_SERVERS and settings.LLM_QUEUE_REDIS_URL:
        queue = llm_queue()
        if isinstance(queue, RedisLLMQueue):
            return _pools.get(
                (*key, queue.namespace, id(queue)), lambda: SharedServerPool(llm_servers(), queue)
            )
    return _pools.get(key, lambda: ServerPool(llm_servers()))


def llm_queue() -> TurnQueue:
    """The queue of turns into the configured LLM server, one per server (and policy) in this process;
    with `LLM_QUEUE_REDIS_URL`, this process's handle on the queue every process shares in Redis."""
    # Several servers: the slots of all of them, and one prompt in prefill per server.
    servers = llm_servers() if settings.LLM_SERVERS else []
    streams = sum(server.slots for server in servers) if servers else settings.LLM_STREAMS
    prefill = settings.LLM_PREFILL_AT_ONCE * max(1, len(servers))
    key = (settings.LLM_SERVERS or settings.LLM_BASE_URL, prefill, streams, settings.LLM_QUEUE_LIMIT,
           settings.LLM_QUEUE_PER_USER, settings.LLM_QUEUE_REDIS_URL)
    policy = {"prefill": key[1], "streams": key[2], "limit": key[3], "per_user": key[4]}
    if settings.LLM_QUEUE_REDIS_URL:
        return _queues.get(key, lambda: RedisLLMQueue(redis_url=key[5], server_url=key[0], **policy))
    return _queues.get(key, lambda: LLMQueue(**policy))


def memory_budget(requested: int, *, waiting: bool) -> int:
    """Memory tokens for a turn's prompt: `requested`, capped at `LLM_BUSY_TOKEN_BUDGET` (when set)
    for a turn that has to wait for the LLM."""
    busy = settings.LLM_BUSY_TOKEN_BUDGET
    return min(requested, busy) if waiting and busy else requested


def generation_settings(*, temperature: float | None = None) -> GenerationSettings:
    """The engine config's sampling, with a conversation's own `temperature` when it has one."""
    return GenerationSettings.from_config(engine_config(), temperature=temperature)


def context_budget() -> ContextBudget:
    return ContextBudget.from_config(engine_config())


def token_counter(*, model: str = "", affinity: object = None) -> TokenCounter:
    """Counts in the tokens of the model that answers (a server's `/tokenize`, remembered per text):
    the chat model's vocabulary is not the embedding model's, nor another served model's.

    A turn's prompt is built while the turn waits in the queue, and its server is taken only when
    the queue admits it (`ServerPool.take`: a slot held from then on), so the prompt is counted on
    the server of `model` (the pool's default model when empty) that the pool would give the
    conversation (`affinity`) now. Every server of one model has that model's tokenizer, so the
    count is the answering server's whichever of them it turns out to be. A model no server serves
    is refused when the turn is answered (`ServerPool.unserved`); meanwhile it counts on the first."""
    pool = server_pool()
    server = pool.choose(model or pool.default_model, affinity) or pool.servers[0]
    return _counters.get((server.url, server.key), lambda: ServerTokenCounter(server.url, api_key=server.key))


def retrieval_executor() -> ThreadPoolExecutor:
    """The threads chat retrieval runs on. Retrieval's kernels are already parallel (numba/OpenMP
    over every core), so a few long-lived threads keep their OpenMP teams warm without
    oversubscribing the cores (a fresh thread measured ~10 ms slower on its first searches); two,
    so one slow search does not stall every chat."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=RETRIEVAL_THREADS, thread_name_prefix="chat-retrieval")
        return _executor
