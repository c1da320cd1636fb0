"""Conversations and their turns (the chat's own `run_turn`), owner only: others get 404."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.utils.text import slugify
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import ConversationWriteSerializer, MessageSendSerializer, TurnSerializer
from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path, page_of
from api.views.sse import sse_frame, sse_response
from chat.exports import conversation_export
from chat.llm import clients
from chat.model_rights import model_for_turn
from chat.selectors import conversation_get_for_user, conversation_messages, conversations_for_user
from chat.serializers import ConversationSerializer, MessageSerializer
from chat.services import conversation_create, conversation_delete, conversation_update
from chat.turns import run_turn
from chat.usage import turn_quota_check
from core.errors import ApplicationError

CONVERSATION = id_path("conversation_id", "conversation")


class TurnFailed(ApplicationError):
    """A stored turn whose answer failed (the user's turn is kept): the failure's message, code and
    status (`chat.turns`, `chat.llm.errors`), with the ids of the stored messages."""

    def __init__(self, failure: ApplicationError, *, details: dict) -> None:
        super().__init__(failure.message, details)
        self.code, self.status = failure.code, failure.status


def _conversation(request: Request, conversation_id: int):  # chat.models.Conversation
    return conversation_get_for_user(user=request.user, pk=conversation_id)


class ConversationList(ApiView):
    @extend_schema(operation_id="conversations_list", summary="Your conversations, latest first",
                   parameters=PAGE_PARAMETERS, responses={200: page_of(ConversationSerializer), **errors()},
                   tags=["conversations"])
    def get(self, request: Request) -> Response:
        conversations = (
            conversations_for_user(user=request.user).prefetch_related("corpora").order_by("-updated", "-id")
        )
        return self.paginated(conversations, ConversationSerializer)

    @extend_schema(
        operation_id="conversations_create",
        summary="Start a conversation over some corpora",
        request=ConversationWriteSerializer,
        responses={201: ConversationSerializer, **errors(400)},
        tags=["conversations"],
    )
    def post(self, request: Request) -> Response:
        serializer = ConversationWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        conversation = conversation_create(user=request.user, corpus_ids=data.pop("corpora", []), **data)
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)


class ConversationDetail(ApiView):
    @extend_schema(operation_id="conversations_get", summary="One conversation", parameters=[CONVERSATION],
                   responses={200: ConversationSerializer, **errors()}, tags=["conversations"])
    def get(self, request: Request, conversation_id: int) -> Response:
        return Response(ConversationSerializer(_conversation(request, conversation_id)).data)

    @extend_schema(operation_id="conversations_update", summary="Change a conversation's title, corpora or "
                   "memory settings", parameters=[CONVERSATION], request=ConversationWriteSerializer,
                   responses={200: ConversationSerializer, **errors(400)}, tags=["conversations"])
    def patch(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation(request, conversation_id)
        serializer = ConversationWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        conversation = conversation_update(
            conversation=conversation, corpus_ids=data.pop("corpora", None), **data
        )
        return Response(ConversationSerializer(conversation).data)

    @extend_schema(operation_id="conversations_delete", summary="Delete a conversation",
                   parameters=[CONVERSATION], responses={204: None, **errors()}, tags=["conversations"])
    def delete(self, request: Request, conversation_id: int) -> Response:
        conversation_delete(conversation=_conversation(request, conversation_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageList(ApiView):
    @extend_schema(operation_id="messages_list", summary="A conversation's messages, oldest first",
                   parameters=[CONVERSATION, *PAGE_PARAMETERS], responses={200: page_of(MessageSerializer),
                                                                          **errors()}, tags=["conversations"])
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation(request, conversation_id)
        return self.paginated(conversation_messages(conversation=conversation), MessageSerializer)

    @extend_schema(
        operation_id="messages_send",
        summary="Send a turn: the answer returned whole, or streamed as SSE",
        description="With `stream: true` the reply is `text/event-stream`: events `chat.accepted`, "
        "`chat.memories`, `chat.delta` (one per piece of the answer), then `chat.done` or "
        "`chat.error`, each with a JSON `data` line (the websocket's events, see docs/api.md).",
        parameters=[CONVERSATION],
        request=MessageSendSerializer,
        responses={
            201: TurnSerializer,
            (200, "text/event-stream"): OpenApiResponse(str, description="Server-Sent Events (stream)."),
            **errors(400, 502, 503),
        },
        tags=["conversations"],
    )
    def post(self, request: Request, conversation_id: int) -> Response | HttpResponse:
        conversation = _conversation(request, conversation_id)
        serializer = MessageSendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        content = serializer.validated_data["content"]
        if not content.strip():
            raise ApplicationError("The message must not be empty.", {"content": content})
        model_for_turn(
            request.user, conversation.model
        )  # a model he may not use: 400 before anything is stored
        turn_quota_check(user=request.user)  # today's quota used: 429 with Retry-After, nothing stored
        # A place in the LLM queue before anything is stored: a full queue is a 429 with Retry-After.
        ticket = clients.llm_queue().enter(request.user.pk)
        turn = {
            "conversation_id": conversation.pk,
            "user_id": request.user.pk,
            "content": content,
            "ticket": ticket,
        }
        if serializer.validated_data["stream"]:
            async def produce(emit) -> None:
                async def on_event(event: dict) -> None:
                    await emit(sse_frame(event, event=event["type"]))

                await run_turn(**turn, emit=on_event)

            return sse_response(produce, on_close=ticket.close)
        result = async_to_sync(run_turn)(**turn, emit=_unheard)
        if result.failure is not None:
            raise TurnFailed(
                result.failure,
                details={"user_message": result.user_message_id, "message": result.assistant_message_id},
            )
        return Response(TurnSerializer(result).data, status=status.HTTP_201_CREATED)


async def _unheard(event: dict) -> None:
    """A whole reply reads the turn's result, not its events."""


class ConversationExport(ApiView):
    @extend_schema(
        operation_id="conversations_export",
        summary="Export as ShareGPT JSONL or Markdown",
        parameters=[
            CONVERSATION,
            OpenApiParameter("format", str, enum=["jsonl", "md"], description="jsonl (default) or md."),
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(str, description="JSONL (one line)."),
            (200, "text/markdown"): OpenApiResponse(str, description="Markdown."),
            **errors(400),
        },
        tags=["conversations"],
    )
    def get(self, request: Request, conversation_id: int) -> HttpResponse:
        conversation = _conversation(request, conversation_id)
        fmt = request.query_params.get("format", "jsonl")
        if fmt not in ("jsonl", "md"):
            raise ApplicationError(f"format must be jsonl or md, got {fmt!r}.", {"format": fmt})
        stem = f"conversation-{conversation.pk}-{slugify(conversation.title)[:40] or 'chat'}"
        kind = "application/x-ndjson" if fmt == "jsonl" else "text/markdown"
        response = HttpResponse(conversation_export(conversation=conversation, fmt=fmt),
                                content_type=f"{kind}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{stem}.{fmt}"'
        return response


