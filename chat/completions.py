"""OpenAI-compatible chat completions: stateless turns primed with one corpus's memories.

The client sends the whole history in `messages` (OpenAI's request shape); nothing is stored.
Retrieval and prompt assembly are the chat's own (`memory.services.memories_search`, the
engine's `assemble_prompt`), with the blend taken from the assistant turns in `messages`, so an
integration sees what the chat page would retrieve for the same exchange.

Models: `none` (no memories) and `corpus-<id>` for each corpus the user may read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404

from chat.citations import answer_citations
from chat.models import DEFAULT_TOKEN_BUDGET
from corpus.models import Corpus
from corpus.selectors import corpora_visible_to, get_corpus_for_user
from engine.llm import GenerationSettings, PromptPlan, assemble_prompt
from engine.retrieval import BlendState
from hdrag_site import runtime
from hdrag_site.errors import ApplicationError
from memory.services import memories_search

MODEL_NONE = "none"
MODEL_PREFIX = "corpus-"
ROLES = ("system", "user", "assistant")


class ModelNotFound(ApplicationError):
    code = "model_not_found"
    status = 404


@dataclass(frozen=True)
class CompletionPlan:
    model: str
    plan: PromptPlan
    memories: list[dict]
    retrieval_seconds: float
    settings: GenerationSettings
    loop_retries: int = 0  # continuations after a loop (engine Config.loop_retries); streamed answers get none
    question: str = ""  # the last user message: its words are not what a sentence of the answer claims


def completion_citations(*, prepared: CompletionPlan, answer: str) -> dict[str, Any]:
    """The reply's `hdrag` object: {"grounding", "grounding_word", "citations"} (`chat.citations`)."""
    return answer_citations(question=prepared.question, answer=answer,
                            memory_texts=[r["memory"]["text"] for r in prepared.memories]).to_json()


def completion_models(*, user: AbstractBaseUser) -> list[dict[str, Any]]:
    """`none`, then one model per readable corpus (id `corpus-<id>`), in the OpenAI list format."""
    models = [{"id": MODEL_NONE, "object": "model", "created": 0, "owned_by": "hdrag",
               "description": "The LLM alone, without memories."}]
    for corpus in corpora_visible_to(user).select_related("owner").order_by("pk"):
        models.append({"id": f"{MODEL_PREFIX}{corpus.pk}", "object": "model",
                       "created": int(corpus.created.timestamp()), "owned_by": corpus.owner.get_username(),
                       "description": f"Primed with the memories of {corpus.name!r}"
                                      + ("" if corpus.active_build_id else " (not built yet: no memories)")})
    return models


def completion_corpus(*, user: AbstractBaseUser, model: str) -> Corpus | None:
    """The corpus a model id names (None for `none`); ModelNotFound (404) for anything else,
    unreadable corpora included."""
    if model == MODEL_NONE:
        return None
    suffix = model[len(MODEL_PREFIX):] if model.startswith(MODEL_PREFIX) else ""
    try:
        if not suffix.isdigit() or len(suffix) > 18:
            raise Http404(model)
        return get_corpus_for_user(user, int(suffix))
    except Http404:
        raise ModelNotFound(f"No model {model!r}; GET /api/v1/models lists them.", {"model": model}) from None


def _text(content: Any, number: int) -> str:
    """A message's content: a string, or OpenAI's list of parts of which only text is supported."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApplicationError(f"messages[{number}]: only text content parts are supported.",
                                       {"message": number})
            parts.append(part["text"])
        return "".join(parts)
    raise ApplicationError(f"messages[{number}]: content must be a string or a list of text parts.",
                           {"message": number})


def completion_prepare(*, user: AbstractBaseUser, model: str, messages: list[dict[str, Any]],
                       temperature: float | None = None, top_p: float | None = None,
                       max_tokens: int | None = None, waiting: bool = False) -> CompletionPlan:
    """Retrieve for the last user message (blended with the assistant turns) and assemble the
    prompt as the chat does: the client's system messages (else the configured system prompt),
    the history, and the new user turn carrying the memories (as many as fit, memories per
    answer as a new conversation's `DEFAULT_TOKEN_BUDGET`).

    `waiting`: the turn waits for the LLM (its memory budget may be smaller, `runtime.memory_budget`).
    Raises ApplicationError for malformed messages, ModelNotFound, PromptTooLongError.
    """
    corpus = completion_corpus(user=user, model=model)
    if not messages:
        raise ApplicationError("messages must not be empty.", {"messages": []})
    turns: list[tuple[str, str]] = []
    system: list[str] = []
    for number, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise ApplicationError(f"messages[{number}]: role must be one of {', '.join(ROLES)}, got {role!r}.",
                                   {"message": number})
        text = _text(message.get("content", ""), number)
        if role == "system":
            system.append(text)
        else:
            turns.append((role, text))
    if not turns or turns[-1][0] != "user" or not turns[-1][1].strip():
        raise ApplicationError("The last message must be a non-empty user message.", {"messages": len(messages)})
    history, user_message = turns[:-1], turns[-1][1]
    config = runtime.engine_config()
    budget = runtime.context_budget()
    try:
        defaults = runtime.generation_settings(temperature=None if temperature is None else float(temperature))
        settings = replace(defaults, top_p=defaults.top_p if top_p is None else float(top_p),
                           # The context budget reserves the configured answer length; a longer one would not fit.
                           max_tokens=min(int(max_tokens), defaults.max_tokens) if max_tokens else defaults.max_tokens)
    except ValueError as error:
        raise ApplicationError(str(error)) from None
    system_prompt = "\n\n".join(text for text in system if text.strip()) or config.system_prompt
    tokenizer = runtime.token_counter()
    started = time.perf_counter()
    results: list[dict] = []
    if corpus is not None and corpus.active_build_id:
        search_budget = budget.search_budget(system_prompt=system_prompt, user_message=user_message,
                                             tokenizer=tokenizer,
                                             requested=runtime.memory_budget(DEFAULT_TOKEN_BUDGET, waiting=waiting))
        if search_budget > 0:
            blend = BlendState(text for role, text in history if role == "assistant")
            results = memories_search(user=user, corpora=[corpus], query=user_message, blend=blend,
                                      token_budget=search_budget)
    retrieval = time.perf_counter() - started
    plan = assemble_prompt(system_prompt=system_prompt, history=history, user_message=user_message,
                           memories=[r["memory"]["text"] for r in results], tokenizer=tokenizer, budget=budget)
    results = results[:plan.memories_used]
    return CompletionPlan(model=model, plan=plan, memories=results, retrieval_seconds=retrieval, settings=settings,
                          loop_retries=config.loop_retries, question=user_message)
