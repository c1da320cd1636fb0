"""One turn's preparation, for the chat (`chat.turns`) and the OpenAI-compatible endpoint
(`chat.completions`) alike: retrieval with the conversation's settings, the memory budget, prompt
assembly and the sampling settings.

Both build a `ConversationState` (the chat from the stored conversation, the endpoint from the
request's messages and options) and call `turn_prepare`, so the same state sends llama.cpp the
same request whichever way it came.

Access control is `memory.services.memories_search`'s: it is applied again at every turn, so a
corpus unshared since it was chosen is simply no longer searched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from django.contrib.auth.models import AbstractBaseUser

from chat.llm import clients
from chat.models import DEFAULT_TOKEN_BUDGET, Conversation
from chat.selectors import conversation_history
from core import runtime
from core.errors import ApplicationError
from engine.bits import compress_context
from engine.llm.history import follow_up_query, history_for_prompt
from engine.llm.prompt import PromptPlan, Role, assemble_prompt
from engine.llm.sampling import GenerationSettings
from engine.query import BlendState
from memory.services import MemoryResult, memories_search


@dataclass(frozen=True)
class ConversationState:
    """What a turn is prepared from besides its question. Unset sampling values (None) and an
    empty `system_prompt` are the engine config's."""

    history: Sequence[tuple[Role, str]] = ()  # (role, text) of the earlier turns, oldest first
    corpus_ids: tuple[int, ...] = ()  # searched (those `user` may read); none: the LLM alone
    blend: BlendState | None = field(default=None, compare=False)
    token_budget: int = DEFAULT_TOKEN_BUDGET  # memory tokens asked for
    top_document: bool = False  # only the best memory
    compress_context: bool = False  # each memory without its words more frequent than the median
    system_prompt: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None

    @classmethod
    def of_conversation(
        cls, conversation: Conversation, *, before_id: int | None = None
    ) -> ConversationState:
        """A stored conversation's state, fresh from its rows: its corpora (none with memory off),
        its own blend, settings and the turns before message `before_id`."""
        corpus_ids = tuple(conversation.corpora.order_by("pk").values_list("pk", flat=True)) \
            if conversation.use_memory else ()
        return cls(history=conversation_history(conversation_id=conversation.pk, before_id=before_id),
                   corpus_ids=corpus_ids, blend=BlendState.from_dict(conversation.blend_state),
                   token_budget=conversation.token_budget, top_document=conversation.top_document,
                   compress_context=conversation.compress_context, temperature=conversation.temperature)


@dataclass(frozen=True)
class PreparedTurn:
    """A turn ready for the LLM: `plan.messages` is what is sent, with `generation`."""

    question: str
    plan: PromptPlan
    memories: list[MemoryResult]  # the results that primed it, best first
    retrieval_seconds: float
    generation: GenerationSettings
    loop_retries: int  # continuations after a loop (engine Config.loop_retries)


def turn_memories(*, user: AbstractBaseUser, state: ConversationState, question: str,
                  token_budget: int) -> list[MemoryResult]:
    """Ranked memories for `question` from the state's corpora, with its blend and `top_document`."""
    if not state.corpus_ids:
        return []
    return memories_search(user=user, corpus_ids=state.corpus_ids, query=question, blend=state.blend,
                           token_budget=token_budget, top_document=state.top_document)


def turn_prepare(*, user: AbstractBaseUser, state: ConversationState, question: str, waiting: bool = False,
                 model: str = "", affinity: object = None) -> PreparedTurn:
    """Retrieve for `question` as `user` and assemble the prompt: the system prompt, the history
    the engine's `history_policy` lets in (`engine.llm.history`) as far as it fits, and the new
    user turn carrying the memories that fit (each compressed with
    `compress_context`). A turn `waiting` for the LLM gets at most `LLM_BUSY_TOKEN_BUDGET` memory
    tokens (when set, `clients.memory_budget`): a shorter prompt is a shorter prefill for it and for
    every turn behind it. Tokens are counted in `model`'s own (the LLM model that answers, the pool's
    default when empty), on the server the pool would give `affinity` (a conversation) now
    (`clients.token_counter`).

    Raises ApplicationError for sampling values out of range, PromptTooLongError.
    """
    config = runtime.engine_config()
    generation = _generation(state)
    budget = clients.context_budget()
    tokenizer = clients.token_counter(model=model, affinity=affinity)
    system_prompt = state.system_prompt or config.system_prompt
    started = time.perf_counter()
    results: list[MemoryResult] = []
    if state.corpus_ids:
        search_budget = budget.search_budget(
            system_prompt=system_prompt,
            user_message=question,
            tokenizer=tokenizer,
            requested=clients.memory_budget(state.token_budget, waiting=waiting),
        )
        if search_budget > 0:
            query = follow_up_query(state.history, question) if config.follow_up_query else question
            results = turn_memories(user=user, state=state, question=query, token_budget=search_budget)
    retrieval = time.perf_counter() - started
    texts = [r.memory.text for r in results]
    if state.compress_context:
        texts = [compress_context(text) for text in texts]
    history = history_for_prompt(state.history, config.history_policy)
    plan = assemble_prompt(system_prompt=system_prompt, history=history, user_message=question,
                           memories=texts, tokenizer=tokenizer, budget=budget)
    return PreparedTurn(question=question, plan=plan, memories=results[:plan.memories_used],
                        retrieval_seconds=retrieval, generation=generation, loop_retries=config.loop_retries)


def _generation(state: ConversationState) -> GenerationSettings:
    try:
        defaults = clients.generation_settings(temperature=state.temperature)
        return replace(defaults, top_p=defaults.top_p if state.top_p is None else float(state.top_p),
                       # The context budget reserves the configured answer length; a longer one would not fit.
                       max_tokens=min(int(state.max_tokens), defaults.max_tokens) if state.max_tokens
                       else defaults.max_tokens)
    except ValueError as error:
        raise ApplicationError(str(error)) from None
