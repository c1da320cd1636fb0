"""Conversations, their messages, and the memories that primed each answer."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

DEFAULT_TITLE = "New conversation"
MAX_TOKEN_BUDGET = 131072
# Memory tokens per answer: several memories of the default 256-token chunks, and a prompt the
# default chat model prefills within about 3 s on 2 cores (bench/answers.py).
DEFAULT_TOKEN_BUDGET = 512
MAX_TEMPERATURE = 2.0


class Conversation(models.Model):
    """One user's chat: its corpora, memory toggles and blend history.

    `blend_state` is the engine's `BlendState.to_dict()`: the model responses that steer this
    conversation's retrieval. It lives on the row, so it survives reconnects and restarts and is
    never shared with another conversation.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, default=DEFAULT_TITLE)
    corpora = models.ManyToManyField("corpus.Corpus", blank=True, related_name="+")
    use_memory = models.BooleanField(default=True)
    top_document = models.BooleanField(default=False)
    compress_context = models.BooleanField(default=False)
    token_budget = models.PositiveIntegerField(
        default=DEFAULT_TOKEN_BUDGET, validators=[MinValueValidator(1), MaxValueValidator(MAX_TOKEN_BUDGET)],
        help_text="Most tokens of retrieved memories per answer (capped by the model's context).")
    temperature = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(MAX_TEMPERATURE)],
        help_text="Sampling temperature of the answers; blank: the model's recommended default.")
    model = models.CharField(
        max_length=200,
        blank=True,
        help_text="The LLM model that answers (one the server pool serves); blank: the default model.",
    )
    blend_state = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated", "-id"]
        indexes = [models.Index(fields=["owner", "-updated"])]

    def __str__(self) -> str:
        return self.title


class LLMModel(models.Model):
    """What the admin says of one LLM model the servers serve (`chat.llm_models`): whether it is the
    default, and which groups may use it. A model without groups (or without a row) is open to every
    user; one with groups is for their members only (and superusers)."""

    name = models.CharField(max_length=200, unique=True,
                            help_text="The model's name as LLM_SERVERS (or LLM_MODEL) gives it.")
    is_default = models.BooleanField(
        default=False,
        help_text="The model of conversations that name none "
        "(for a user who may not use it: his first model).",
    )
    groups = models.ManyToManyField(Group, blank=True, related_name="llm_models",
                                    help_text="Who may use it; none: every user.")

    class Meta:
        verbose_name = "LLM model"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["is_default"], condition=models.Q(is_default=True),
                                               name="chat_llmmodel_one_default",
                                               violation_error_message="Only one LLM model is the default.")]

    def __str__(self) -> str:
        return self.name


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    class Status(models.TextChoices):
        COMPLETE = "complete", "Complete"
        STOPPED = "stopped", "Stopped"
        REPETITION = "repetition", "Stopped: it began repeating itself"
        ERROR = "error", "Error"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    error = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    # engine.citations: the share of the answer's claim sentences a primed memory supports (null:
    # nothing to check, e.g. no memories), and each sentence's `SentenceCitation.to_dict()`.
    grounding = models.FloatField(null=True, blank=True)
    citations = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=200, blank=True, help_text="The LLM model that wrote the answer.")

    class Meta:
        ordering = ["created", "id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class MessageMemory(models.Model):
    """A memory that primed an answer, with a snapshot that outlives rebuilds of its corpus.

    `memory` points at the memory row while it exists; `memory_key` (the engine's content hash),
    `corpus_name`, `source`, `place`, `excerpt` and `score` keep what the user saw after it is gone.
    """

    EXCERPT_CHARS = 2000
    PLACE_CHARS = 300

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="memories")
    rank = models.PositiveIntegerField()
    memory = models.ForeignKey(
        "corpus.Memory", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    memory_key = models.CharField(max_length=64, blank=True)
    corpus_name = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=500, blank=True)
    score = models.FloatField()
    token_count = models.PositiveIntegerField(default=0)
    excerpt = models.TextField(blank=True)
    place = models.CharField(
        max_length=PLACE_CHARS, blank=True,
        help_text='Where in its document it came from, in words ("page 12"; engine.places).')

    class Meta:
        ordering = ["message", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["message", "rank"], name="chat_messagememory_unique_rank")
        ]

    def __str__(self) -> str:
        return f"{self.memory_key or '?'} ({self.score:g})"


class AnswerFeedback(models.Model):
    """A person's rating of an answer (thumbs up or down) and an optional comment: what staff read
    to find the answers retrieval or the model got wrong (`chat.feedback`)."""

    class Rating(models.IntegerChoices):
        UP = 1, "up"
        DOWN = -1, "down"

    COMMENT_CHARS = 2000

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    rating = models.SmallIntegerField(choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=COMMENT_CHARS)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on message {self.message_id}"


class TurnRecord(models.Model):
    """One chat turn on any surface: the chat page and the conversations API (with its `message`)
    or the OpenAI-compatible endpoint. What quotas count and the usage page draws (`chat.usage`);
    kept `USAGE_RETENTION_DAYS`."""

    class Surface(models.TextChoices):
        CHAT = "chat", "Chat (page or conversations API)"
        OPENAI = "openai", "OpenAI-compatible endpoint"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(default=timezone.now, db_index=True)
    surface = models.CharField(max_length=16, choices=Surface.choices)
    message = models.OneToOneField(Message, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="turn_record")
    corpus_ids = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=200, blank=True)
    server = models.CharField(max_length=500, blank=True, help_text="The LLM server, without credentials.")
    status = models.CharField(max_length=16)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    first_token_ms = models.FloatField(null=True, blank=True)
    grounding = models.FloatField(null=True, blank=True)
    memories = models.PositiveIntegerField(default=0, help_text="Memories that primed the answer.")

    class Meta:
        indexes = [models.Index(fields=["user", "created"], name="chat_turnrecord_user_day")]

    def __str__(self) -> str:
        return f"{self.surface} turn of {self.user_id} at {self.created:%Y-%m-%d %H:%M}"
