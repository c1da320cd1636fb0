"""Feedback on answers: a person rates an answer of their own conversations; staff read every rating,
the worst first (`chat.feedback`). Others get 404 (an answer) or 403 (the staff list)."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from api.views.base import PAGE_PARAMETERS, ApiView, errors, id_path, page_of
from chat.feedback import feedback_record, feedback_review, feedback_set
from chat.models import AnswerFeedback
from chat.serializers import FeedbackRecordSerializer, FeedbackSerializer, FeedbackWriteSerializer

TAGS = ["conversations"]


class MessageFeedback(ApiView):
    @extend_schema(
        operation_id="messages_feedback",
        summary="Rate an answer (thumbs up or down, a comment)",
        parameters=[id_path("conversation_id", "conversation"), id_path("message_id", "answer")],
        request=FeedbackWriteSerializer,
        responses={200: FeedbackSerializer, 204: None, **errors(400)},
        tags=TAGS,
    )
    def put(self, request: Request, conversation_id: int, message_id: int) -> Response:
        serializer = FeedbackWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        feedback = feedback_set(user=request.user, conversation_id=conversation_id, message_id=message_id,
                                **serializer.validated_data)
        if feedback is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(FeedbackSerializer(feedback).data)


class FeedbackList(ApiView):
    @extend_schema(
        operation_id="feedback_list",
        summary="Rated answers, the worst first (staff)",
        parameters=[
            OpenApiParameter("rating", str, enum=["up", "down"], description="Only these."),
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(FeedbackRecordSerializer), **errors(403)},
        tags=["staff"],
    )
    def get(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff read every rating.")
        rated = feedback_review(rating=request.query_params.get("rating", ""))
        return self.paginated(_Records(rated), FeedbackRecordSerializer)


class _Records:
    """The rated answers as records, one page at a time (the paginator slices, then each is read)."""

    def __init__(self, rated: QuerySet[AnswerFeedback]) -> None:
        self.rated = rated

    def __len__(self) -> int:
        return self.rated.count()

    def count(self) -> int:
        return self.rated.count()

    def __getitem__(self, page: slice) -> list[dict]:
        return [feedback_record(feedback) for feedback in self.rated[page]]
