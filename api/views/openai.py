"""OpenAI-compatible endpoints: `GET models`, `POST chat/completions` (whole or streamed in the
OpenAI chunk format), so the official clients work with `base_url=<site>/api/v1`."""

from __future__ import annotations

import time
import uuid

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import (
    ChatCompletionRequestSerializer,
    ChatCompletionSerializer,
    ModelListSerializer,
    ModelSerializer,
)
from api.views.base import ApiView, errors
from api.views.sse import sse_frame, sse_response
from chat.completions import (
    CompletionTarget,
    ModelNotFound,
    completion_citations,
    completion_models,
    completion_prepare,
    completion_target,
)
from chat.llm import clients
from chat.llm.answer import AnswerClock, turn_answer
from chat.llm.errors import llm_failure
from chat.llm.queue import Ticket
from chat.models import TurnRecord
from chat.preparation import PreparedTurn
from chat.usage import turn_quota_check, turn_record_create
from engine.llm.answer import AnswerTokens, TokenSpan
from engine.llm.errors import LLMError, PromptTooLongError
from engine.llm.stream import Usage

TAGS = ["openai"]
# The request's extra fields that are a conversation's settings (`completion_prepare`).
CONVERSATION_SETTINGS = ("token_budget", "top_document", "compress_context")


class ModelList(ApiView):
    @extend_schema(
        operation_id="models_list",
        summary="Models: `none` and `corpus-<id>` per readable corpus, each also as `<that>@<llm model>`",
        description="Each of `none` and `corpus-<id>` (a corpus the user may read) bare, answered by "
        "the user's default LLM model, then followed by `@<llm model>` for each LLM model "
        "the user may use (docs/llm-servers.md).",
        responses={200: ModelListSerializer, **errors()},
        tags=TAGS,
    )
    def get(self, request: Request) -> Response:
        return Response(
            ModelListSerializer({"object": "list", "data": completion_models(user=request.user)}).data
        )


class ModelDetail(ApiView):
    @extend_schema(operation_id="models_get", summary="One model",
                   parameters=[OpenApiParameter("model_id", str, OpenApiParameter.PATH)],
                   responses={200: ModelSerializer, **errors()}, tags=TAGS)
    def get(self, request: Request, model_id: str) -> Response:
        for model in completion_models(user=request.user):
            if model["id"] == model_id:
                return Response(ModelSerializer(model).data)
        raise ModelNotFound(f"No model {model_id!r}.", {"model": model_id})


def _chunk(
    completion_id: str, created: int, model: str, delta: dict, finish_reason: str | None = None
) -> dict:
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def _usage(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


class ChatCompletions(ApiView):
    @extend_schema(
        operation_id="chat_completions",
        summary="OpenAI-compatible chat completion primed with a corpus's memories",
        description="The OpenAI request shape. `model` is `none` or `corpus-<id>`, optionally followed by "
        "`@<llm model>` (GET models; bare: the user's default LLM model), and the reply's `model` "
        "is `<that>@<the llm model that answered>`; the memories of that corpus "
        "for the last user message (blended with the assistant turns in `messages`) prime it, prepared "
        "as a conversation's turn is; the extra fields `token_budget`, `top_document` and "
        "`compress_context` are a conversation's settings. With `stream: true` the reply is OpenAI's SSE "
        "chunk stream ending in `data: [DONE]`; "
        'an LLM failure mid-stream arrives as a `data: {"error": ...}` event. An answer that starts '
        'looping is cut and ends with `finish_reason: "length"`.',
        request=ChatCompletionRequestSerializer,
        responses={
            (200, "application/json"): OpenApiResponse(
                ChatCompletionSerializer, description="A `chat.completion`."
            ),
            (200, "text/event-stream"): OpenApiResponse(
                str, description="`chat.completion.chunk` events (stream: true)."
            ),
            **errors(400, 502, 503),
        },
        tags=TAGS,
    )
    def post(self, request: Request) -> Response | HttpResponse:
        serializer = ChatCompletionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        max_tokens = data.get("max_completion_tokens") or data.get("max_tokens")
        # Which corpus and LLM model: an unknown one is a 404 before the turn takes a place in the queue.
        target = completion_target(user=request.user, model=data["model"])
        turn_quota_check(user=request.user)  # today's quota used: 429 with Retry-After
        # A place in the LLM queue first (a full queue: 429 with Retry-After); retrieval runs meanwhile.
        ticket = clients.llm_queue().enter(request.user.pk)
        try:
            prepared = completion_prepare(
                user=request.user,
                corpus=target.corpus,
                messages=data["messages"],
                temperature=data.get("temperature"),
                top_p=data.get("top_p"),
                max_tokens=max_tokens,
                waiting=not ticket.admitted,
                llm_model=target.llm_model,
                **{name: data[name] for name in CONVERSATION_SETTINGS if name in data},
            )
        except BaseException as error:
            ticket.close()
            if isinstance(error, PromptTooLongError):
                raise llm_failure(error).openai() from None
            raise
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if data["stream"]:
            include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
            return sse_response(lambda emit: _stream(emit, prepared, ticket, completion_id, created, target,
                                                     include_usage, request.user.pk),
                                on_close=ticket.close)
        try:
            text, finish_reason, usage, tokens = async_to_sync(_complete)(
                prepared, ticket, target, request.user.pk
            )
        except LLMError as error:
            raise llm_failure(error).openai() from None
        finally:
            ticket.close()
        return Response(ChatCompletionSerializer({
            "id": completion_id, "object": "chat.completion", "created": created, "model": target.id,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish_reason or "stop"}],
            "usage": _usage(usage) or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "memories": prepared.memories,
            "hdrag": completion_citations(prepared=prepared, answer=text, token_logprobs=tokens)}).data)


# An answer that starts looping is cut as in the portal's chat (engine.repetition): leaving the
# stream closes it and llama.cpp stops generating. A whole reply is then continued from the cut
# (`_complete`); one that still loops, or a stream (what was sent cannot be taken back), ends cut,
# and OpenAI's finish reasons have no word for it, so the reply says "length" (cut short by the
# server), with the text up to where the loop began (whole replies) or as streamed so far.
LOOP_FINISH_REASON = "length"


async def _record(
    user_id: int,
    target: CompletionTarget,
    prepared: PreparedTurn,
    clock: AnswerClock,
    status: str,
    usage: Usage | None = None,
) -> None:
    """The completion's `TurnRecord` (usage and quotas); its first token timed from its wait for the LLM."""
    first_token = None if clock.first_token is None else clock.first_token - clock.queued
    await database_sync_to_async(turn_record_create)(
        user_id=user_id, surface=TurnRecord.Surface.OPENAI, status=status, model=target.llm_model,
        server=clock.server.shown_url if clock.server else "", usage=usage, first_token_seconds=first_token,
        memories=len(prepared.memories), corpus_ids=[target.corpus.pk] if target.corpus else [])


async def _complete(prepared: PreparedTurn, ticket: Ticket, target: CompletionTarget,
                    user_id: int) -> tuple[str, str, Usage | None, list[TokenSpan]]:
    """The whole answer from a server of `llm_model`, once the turn's place in the LLM queue comes,
    with its finish reason, usage and token log-probabilities. Nothing was sent yet, so a loop is
    continued from the cut as in the portal's chat (`engine.llm.answer.stream_answer`, up to
    `loop_retries` times); one that loops again ends at the cut with LOOP_FINISH_REASON."""
    tokens, clock = AnswerTokens(), AnswerClock()
    try:
        async with ticket:
            end = await turn_answer(ticket=ticket, prepared=prepared, loop_retries=prepared.loop_retries,
                                    tokens=tokens, clock=clock, model=target.llm_model)
    except LLMError:
        await _record(user_id, target, prepared, clock, "error")
        raise
    await _record(user_id, target, prepared, clock, "repetition" if end.looping else "complete", end.usage)
    return end.content, LOOP_FINISH_REASON if end.looping else end.finish_reason, end.usage, tokens.spans


async def _stream(emit, prepared: PreparedTurn, ticket: Ticket, completion_id: str, created: int,
                  target: CompletionTarget, include_usage: bool, user_id: int) -> None:
    model = target.id
    await emit(sse_frame(_chunk(completion_id, created, model, {"role": "assistant", "content": ""})))
    try:
        async def on_delta(delta: str) -> None:
            await emit(sse_frame(_chunk(completion_id, created, model, {"content": delta})))

        tokens, clock = AnswerTokens(), AnswerClock()
        async with ticket:
            # No continuation (loop_retries 0): what a stream sent cannot be taken back.
            end = await turn_answer(ticket=ticket, prepared=prepared, loop_retries=0, tokens=tokens,
                                    on_delta=on_delta, clock=clock, model=target.llm_model)
    except LLMError as error:
        await _record(user_id, target, prepared, clock, "error")
        failure = llm_failure(error).openai()
        await emit(sse_frame({"error": {"code": failure.code, "message": failure.message, "details": {}}}))
        return
    await _record(user_id, target, prepared, clock, "repetition" if end.looping else "complete", end.usage)
    finish_reason = LOOP_FINISH_REASON if end.looping else end.finish_reason or "stop"
    # The citations of what was streamed, on the finish chunk and (when sent) the usage chunk after it.
    hdrag = completion_citations(prepared=prepared, answer=end.content, token_logprobs=tokens.spans)
    await emit(sse_frame({**_chunk(completion_id, created, model, {}, finish_reason), "hdrag": hdrag}))
    if include_usage and end.usage is not None:
        await emit(sse_frame({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                              "model": model, "choices": [], "usage": _usage(end.usage), "hdrag": hdrag}))
    await emit("data: [DONE]\n\n")
