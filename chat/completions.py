"""OpenAI-compatible chat completions: stateless turns primed with one corpus's memories.

The client sends the whole history in `messages` (OpenAI's request shape); nothing is stored.
The turn is prepared by the chat's own service (`chat.preparation.turn_prepare`), with the blend
taken from the assistant turns in `messages` and a conversation's settings from the request's
extra fields, so an integration's request reaches llama.cpp as the chat page's would for the same
exchange.

Models: `none` (no memories) and `corpus-<id>` for each corpus the user may read, each bare (the
user's default LLM model) or followed by `@<llm model>` for each LLM model he may use
(`chat.model_rights`): `corpus-3@qwen-7b` is corpus 3's memories answered by a server of `qwen-7b`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.http import Http404

from chat.citations import answer_citations
from chat.model_rights import ModelUnknown, model_for_turn, models_for
from chat.models import DEFAULT_TOKEN_BUDGET
from chat.preparation import ConversationState, PreparedTurn, turn_prepare
from core.errors import ApplicationError
from corpus.models import Corpus
from corpus.selectors import corpora_visible_to, get_corpus_for_user
from engine.llm.answer import TokenSpan
from engine.query import BlendState

MODEL_NONE = "none"
MODEL_PREFIX = "corpus-"
MODEL_SEPARATOR = "@"  # `corpus-<id>@<llm model>`: the corpus's memories, answered by that LLM model
ROLES = ("system", "user", "assistant")


class ModelNotFound(ApplicationError):
    code = "model_not_found"
    status = 404


def completion_citations(*, prepared: PreparedTurn, answer: str, token_logprobs: Sequence[TokenSpan] = ()
                         ) -> dict[str, Any]:
    """The reply's `hdrag` object: {"grounding", "grounding_word", "citations"} (`chat.citations`)."""
    return answer_citations(question=prepared.question, answer=answer,
                            memory_texts=[r.memory.text for r in prepared.memories],
                            token_logprobs=token_logprobs).to_json()


def completion_models(*, user: AbstractBaseUser) -> list[dict[str, Any]]:
    """`none`, then one entry per readable corpus (`corpus-<id>`), each bare (the user's default LLM
    model) and then as `<entry>@<model>` for each LLM model he may use (`chat.model_rights`), in the
    OpenAI list format."""
    llm_models = models_for(user)
    bases = [(MODEL_NONE, 0, "hdrag", "The LLM alone, without memories")]
    for corpus in corpora_visible_to(user).select_related("owner").order_by("pk"):
        bases.append(
            (
                f"{MODEL_PREFIX}{corpus.pk}",
                int(corpus.created.timestamp()),
                corpus.owner.get_username(),
                f"Primed with the memories of {corpus.name!r}"
                + ("" if corpus.active_build_id else " (not built yet: no memories)"),
            )
        )
    models = []
    default = f"; answered by your default model ({llm_models[0]})" if llm_models else ""
    for base, created, owner, description in bases:
        models.append({"id": base, "object": "model", "created": created, "owned_by": owner,
                       "description": f"{description}{default}."})
        models += [
            {
                "id": f"{base}{MODEL_SEPARATOR}{llm}",
                "object": "model",
                "created": created,
                "owned_by": owner,
                "description": f"{description}; answered by {llm}.",
            }
            for llm in llm_models
        ]
    return models


@dataclass(frozen=True)
class CompletionTarget:
    """What a completion's `model` names: the corpus searched (None: `none`), the LLM model that
    answers, and the id of both (`<corpus-id or none>@<llm model>`: the reply's `model`)."""

    corpus: Corpus | None
    llm_model: str
    id: str


def completion_target(*, user: AbstractBaseUser, model: str) -> CompletionTarget:
    """The corpus and LLM model `model` names: `none` or `corpus-<id>`, optionally followed by
    `@<llm model>` (bare: the user's default model). ModelNotFound (404) for a corpus he may not
    read, an LLM model no server serves or he may not use, or anything else."""
    base, separator, llm = model.partition(MODEL_SEPARATOR)
    try:
        corpus = completion_corpus(user=user, model=base)
    except ModelNotFound:
        raise ModelNotFound(f"No model {model!r}; GET /api/v1/models lists them.", {"model": model}) from None
    try:
        if separator and not llm.strip():
            raise ModelUnknown(f"name an LLM model after {MODEL_SEPARATOR!r}.", {"models": models_for(user)})
        llm_model = model_for_turn(user, llm)
    except ModelUnknown as error:
        raise ModelNotFound(f"No model {model!r}: {error.message} GET /api/v1/models lists the models.",
                            {"model": model, "models": error.details["models"]}) from None
    return CompletionTarget(corpus=corpus, llm_model=llm_model, id=f"{base}{MODEL_SEPARATOR}{llm_model}")


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
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise ApplicationError(f"messages[{number}]: only text content parts are supported.",
                                       {"message": number})
            parts.append(part["text"])
        return "".join(parts)
    raise ApplicationError(f"messages[{number}]: content must be a string or a list of text parts.",
                           {"message": number})


def completion_prepare(*, user: AbstractBaseUser, corpus: Corpus | None, messages: list[dict[str, Any]],
                       temperature: float | None = None, top_p: float | None = None,
                       max_tokens: int | None = None, token_budget: int = DEFAULT_TOKEN_BUDGET,
                       top_document: bool = False, compress_context: bool = False,
                       waiting: bool = False, llm_model: str = "") -> PreparedTurn:
    """The turn the chat would prepare for a conversation in the state `messages` describe
    (`chat.preparation.turn_prepare`): `corpus` searched for the last user message, with
    the assistant turns as its blend and a conversation's settings (`token_budget`, `top_document`,
    `compress_context`, a new conversation's by default); the client's system messages, else the
    configured system prompt.

    `waiting`: the turn waits for the LLM (its memory budget may be smaller, `runtime.memory_budget`).
    `corpus` is the one a completion's model names (`completion_target`, which has checked that the
    user may read it; None for `none`); its LLM model (`llm_model`, the pool's default when empty)
    answers through the caller, and the prompt is counted in that model's tokens.
    Raises ApplicationError for malformed messages, PromptTooLongError.
    """
    if not messages:
        raise ApplicationError("messages must not be empty.", {"messages": []})
    turns: list[tuple[str, str]] = []
    system: list[str] = []
    for number, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise ApplicationError(
                f"messages[{number}]: role must be one of {', '.join(ROLES)}, got {role!r}.",
                {"message": number},
            )
        text = _text(message.get("content", ""), number)
        if role == "system":
            system.append(text)
        else:
            turns.append((role, text))
    if not turns or turns[-1][0] != "user" or not turns[-1][1].strip():
        raise ApplicationError(
            "The last message must be a non-empty user message.", {"messages": len(messages)}
        )
    history, question = turns[:-1], turns[-1][1]
    state = ConversationState(
        history=history, corpus_ids=(corpus.pk,) if corpus is not None else (),
        blend=BlendState(text for role, text in history if role == "assistant"), token_budget=token_budget,
        top_document=top_document, compress_context=compress_context,
        system_prompt="\n\n".join(text for text in system if text.strip()),
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p), max_tokens=max_tokens)
    return turn_prepare(user=user, state=state, question=question, waiting=waiting, model=llm_model)
