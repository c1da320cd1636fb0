"""The shapes of chat rows as everything outside sends them: the websocket events, the chat page,
the exports and the REST API. Each shape is one DRF serializer, which both produces it and is what
the OpenAPI schema documents (`api.views.conversations`), so the two cannot differ."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chat.models import AnswerFeedback, Conversation, Message, MessageMemory
from chat.selectors import unreadable_memories
from engine.citations import grounding_word
from engine.places import place_label
from memory.services import MemoryResult

EXCERPT_PREVIEW_CHARS = 600


class ConversationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    corpora = serializers.SerializerMethodField()
    use_memory = serializers.BooleanField()
    top_document = serializers.BooleanField()
    compress_context = serializers.BooleanField()
    token_budget = serializers.IntegerField()
    temperature = serializers.FloatField(allow_null=True)
    model = serializers.CharField(help_text="The LLM model that answers; blank: the default model.")
    blend_turns = serializers.SerializerMethodField(
        help_text="Assistant turns the memory blend has taken in."
    )
    updated = serializers.DateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_corpora(self, conversation: Conversation) -> list[int]:
        return sorted(c.pk for c in conversation.corpora.all())

    def get_blend_turns(self, conversation: Conversation) -> int:
        return len((conversation.blend_state or {}).get("responses", []))


class MessageMemorySerializer(serializers.Serializer):
    """A memory that primed an answer, as stored with it (`MessageMemory`): a snapshot that outlives
    the memory's row (a rebuild removes it: `memory_id` null, `url` "")."""

    rank = serializers.IntegerField(allow_null=True, help_text="Its place in retrieval order, from 0.")
    memory_id = serializers.IntegerField(allow_null=True, help_text="The memory's id (GET memories/{id}/).")
    url = serializers.SerializerMethodField(help_text="The memory's page; empty once its row is gone.")
    key = serializers.CharField(source="memory_key", help_text="The memory's content hash.")
    corpus = serializers.CharField(source="corpus_name", help_text="The corpus's name.")
    source = serializers.CharField()
    score = serializers.FloatField()
    token_count = serializers.IntegerField()
    excerpt = serializers.CharField(allow_blank=True)
    place = serializers.CharField(allow_blank=True, help_text=(
        'Where in its document it came from, in words: "page 12", "slide 4"; empty when none is known.'))
    document_url = serializers.SerializerMethodField(help_text=(
        "The document view at its passage (through GET /memory/{id}/document/); empty once its row is gone."))

    def get_url(self, memory: MessageMemory) -> str:
        return reverse("memory:detail", args=[memory.memory_id]) if memory.memory_id else ""

    def get_document_url(self, memory: MessageMemory) -> str:
        return reverse("memory:in_document", args=[memory.memory_id]) if memory.memory_id else ""


class CitationSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="One sentence of the answer, as written.")
    claim = serializers.BooleanField(help_text="It states something to check (false: e.g. a greeting).")
    memories = serializers.ListField(child=serializers.IntegerField(), help_text=(
        "Ranks (0: the first) of the memories that support it, best first; empty for a claim: unsupported."))
    scores = serializers.ListField(child=serializers.FloatField(),
                                   help_text="Its support (0..1) by each memory, in rank order.")
    certainty = serializers.FloatField(allow_null=True, required=False, help_text=(
        "For a claim: the geometric mean of the probabilities the model gave its claim words' tokens "
        "(0..1); null where the LLM server sent no log-probabilities (and in answers stored before)."))
    unsure = serializers.BooleanField(required=False, help_text=(
        "Supported by a memory, but the model was unsure of its words (certainty under 0.5)."))


class FeedbackSerializer(serializers.Serializer):
    rating = serializers.ChoiceField(choices=["up", "down"], source="get_rating_display")
    comment = serializers.CharField(allow_blank=True)


class FeedbackWriteSerializer(serializers.Serializer):
    """A rating sent by the chat page (websocket `chat.feedback`) or the API."""

    rating = serializers.ChoiceField(choices=["up", "down"], allow_null=True,
                                     help_text="up or down; null takes the rating back.")
    comment = serializers.CharField(allow_blank=True, required=False, default="",
                                    max_length=AnswerFeedback.COMMENT_CHARS, help_text="Why (optional).")


class FeedbackMemorySerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    corpus = serializers.CharField()
    source = serializers.CharField()
    score = serializers.FloatField()
    excerpt = serializers.CharField(allow_blank=True)


class FeedbackRecordSerializer(serializers.Serializer):
    """A rated answer as staff read it (`chat.feedback.feedback_record`): the rating, the question, the
    answer with its memories, citations and grounding."""

    id = serializers.IntegerField()
    rating = serializers.ChoiceField(choices=["up", "down"])
    comment = serializers.CharField(allow_blank=True)
    updated = serializers.DateTimeField()
    user = serializers.CharField(allow_blank=True)
    conversation = serializers.IntegerField()
    message = serializers.IntegerField()
    question = serializers.CharField(allow_blank=True)
    answer = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    grounding = serializers.FloatField(allow_null=True)
    citations = CitationSerializer(many=True)
    memories = FeedbackMemorySerializer(many=True)


class MessageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.ChoiceField(choices=["user", "assistant"])
    content = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=Message.Status.values)
    error = serializers.CharField(allow_blank=True)
    created = serializers.DateTimeField()
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)
    finish_reason = serializers.CharField(allow_blank=True)
    memories = serializers.SerializerMethodField(
        help_text="An answer's memories, in rank order; [] for a user turn."
    )
    grounding = serializers.FloatField(allow_null=True, help_text=(
        "Share (0..1) of the answer's claim sentences that a primed memory supports, each weighed by "
        "its certainty where known; null: nothing to check (no memories, or no sentence that states "
        "something)."))
    grounding_word = serializers.SerializerMethodField(
        help_text="The grounding in a word; empty when it is null."
    )
    citations = CitationSerializer(many=True)
    model = serializers.CharField(
        allow_blank=True, help_text="The LLM model that wrote an answer; blank for a user turn."
    )
    feedback = serializers.SerializerMethodField(help_text="Its owner's rating of an answer; null: none.")

    @extend_schema_field(MessageMemorySerializer(many=True))
    def get_memories(self, message: Message) -> list[dict[str, Any]]:
        if message.role != Message.Role.ASSISTANT:
            return []
        memories = list(message.memories.all())
        # A memory its owner may no longer read (`chat.selectors.unreadable_memories`): named, not quoted.
        hidden = unreadable_memories(conversation=message.conversation, messages=[message])
        return [item if memory.memory_id not in hidden else {**item, "excerpt": "", "url": ""}
                for memory, item in zip(memories, MessageMemorySerializer(memories, many=True).data,
                                        strict=True)]

    @extend_schema_field(FeedbackSerializer(allow_null=True))
    def get_feedback(self, message: Message) -> dict[str, Any] | None:
        if message.role != Message.Role.ASSISTANT:
            return None
        try:
            return FeedbackSerializer(message.feedback).data
        except AnswerFeedback.DoesNotExist:
            return None

    @extend_schema_field(serializers.ChoiceField(choices=["grounded", "partly", "not grounded", ""]))
    def get_grounding_word(self, message: Message) -> str:
        return grounding_word(message.grounding)


def memory_result_json(result: MemoryResult, *, rank: int) -> dict[str, Any]:
    """A search result as the chat page shows it (the `chat.memories` event), before it is stored:
    the shape `MessageMemorySerializer` gives the row `chat.services.message_create_assistant`
    will store for it (`rank` counts from 0 in retrieval order)."""
    return MessageMemorySerializer(
        MessageMemory(
            rank=rank,
            memory_id=result.memory_id,
            memory_key=result.memory.content_hash,
            corpus_name=result.corpus_name,
            source=result.source,
            score=result.hdc_score,
            token_count=result.memory.token_count,
            excerpt=result.memory.text[: MessageMemory.EXCERPT_CHARS],
            place=place_label(result.memory.metadata)[: MessageMemory.PLACE_CHARS],
        )
    ).data


def message_json(message: Message) -> dict[str, Any]:
    return MessageSerializer(message).data


def conversation_json(conversation: Conversation) -> dict[str, Any]:
    return ConversationSerializer(conversation).data


class UsageDaySerializer(serializers.Serializer):
    day = serializers.DateField()
    questions = serializers.IntegerField()
    people = serializers.IntegerField(help_text="People who asked that day.")
    tokens = serializers.IntegerField(help_text="LLM tokens, prompt and answer.")


class UsageCorpusSerializer(serializers.Serializer):
    corpus = serializers.CharField()
    questions = serializers.IntegerField()


class UsageModelSerializer(serializers.Serializer):
    model = serializers.CharField()
    server = serializers.CharField()
    answers = serializers.IntegerField()


class UsageBuildSerializer(serializers.Serializer):
    corpus = serializers.CharField()
    number = serializers.IntegerField(allow_null=True)
    kind = serializers.CharField()
    documents = serializers.IntegerField(allow_null=True)
    seconds = serializers.FloatField()
    finished = serializers.DateTimeField()


class UsageLimitsSerializer(serializers.Serializer):
    questions_per_day = serializers.IntegerField(allow_null=True, help_text="null: no limit.")
    tokens_per_day = serializers.IntegerField(allow_null=True, help_text="null: no limit.")
    upload_bytes_per_day = serializers.IntegerField(allow_null=True, help_text="null: no limit.")


class UsageAskerSerializer(serializers.Serializer):
    user = serializers.CharField()
    user_id = serializers.IntegerField()
    questions = serializers.IntegerField()
    tokens = serializers.IntegerField()
    today_questions = serializers.IntegerField()
    today_tokens = serializers.IntegerField()
    limits = UsageLimitsSerializer(help_text="Today's limits (accounts.quotas).")


class UsageReportSerializer(serializers.Serializer):
    """What the usage page shows (`chat.usage_report.UsageReport`)."""

    days = serializers.IntegerField()
    start = serializers.DateField()
    questions = serializers.IntegerField()
    people = serializers.IntegerField()
    daily = UsageDaySerializer(many=True)
    corpora = UsageCorpusSerializer(many=True)
    models = UsageModelSerializer(many=True)
    first_token_p50_ms = serializers.FloatField(allow_null=True)
    first_token_p95_ms = serializers.FloatField(allow_null=True)
    grounding = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Answers per grounding: grounded, partly, not grounded, nothing to check.",
    )
    feedback = serializers.DictField(child=serializers.IntegerField(), help_text="Ratings: up and down.")
    no_memory_share = serializers.FloatField(allow_null=True,
                                             help_text="Share of questions to a corpus that found no memory.")
    slowest_builds = UsageBuildSerializer(many=True)
    askers = UsageAskerSerializer(many=True, help_text="Each person's use, most active first (50 at most).")
