"""Request validation and response shapes (the schema's source). Views map them onto services."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.places import ResultPlaceFields, RowPlaceFields
from chat.models import MAX_TOKEN_BUDGET, Message
from chat.serializers import CitationSerializer, MessageSerializer
from chat.services import MAX_MESSAGE_CHARS
from corpus.corpus_settings import CorpusSetting, settings_declared
from corpus.models import Corpus


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. not_found, permission_denied.")
    message = serializers.CharField(help_text="What went wrong, for people.")
    details = serializers.JSONField(help_text="Field errors or context, for programs.")


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


# The largest id a row can have: auth.Group's AutoField (32 bits) and the portal's BigAutoFields. A
# larger one is refused as a bad value; the database would fail on it (SQLite: OverflowError, a 500).
GROUP_ID_MAX = 2**31 - 1
ROW_ID_MAX = 2**63 - 1


def _group_ids(value: list[int], user: Any, field: str) -> list[Group]:
    groups = Group.objects.all() if user.is_superuser else user.groups.all()
    found = list(groups.filter(pk__in=value))
    missing = sorted(set(value) - {g.pk for g in found})
    if missing:
        raise serializers.ValidationError({field: f"Not groups of yours: {missing}."})
    return found


def _setting_field(setting: CorpusSetting, *, write: bool) -> serializers.Field:
    """The API's field for a declared corpus setting: its type and help text, and what a request
    may send (a stored value is shown as it is, even one accepted under older bounds)."""
    staff = " Staff only." if setting.staff_only else ""
    options: dict[str, Any] = {"help_text": f"{setting.help_text}{staff}"}
    if write:
        options["required"] = False
    if setting.kind is bool:
        return serializers.BooleanField(**options)
    if setting.kind is str:
        return serializers.CharField(allow_blank=True, max_length=setting.max_length, **options)
    if write:
        options.update(min_value=setting.bounds.low, max_value=setting.bounds.high)
    return serializers.IntegerField(**options)


def _with_settings(fields: dict[str, serializers.Field], *, after: str,
                   write: bool) -> dict[str, serializers.Field]:
    """`fields` with a field for each declared corpus setting after the field `after`; a read
    shape leaves out the staff-only ones (a path on the server)."""
    shown = [setting for setting in settings_declared() if write or not setting.staff_only]
    declared = {setting.name: _setting_field(setting, write=write) for setting in shown}
    out: dict[str, serializers.Field] = {}
    for name, field in fields.items():
        out[name] = field
        if name == after:
            out.update(declared)
    return out


# A corpus's name and sharing, and its declared settings (corpus.corpus_settings): what a value
# may be is checked again by the service the page calls too (`corpus_create`, `corpus_update`).
class CorpusWriteSerializer(serializers.Serializer):

    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, max_length=10000)
    visibility = serializers.ChoiceField(choices=Corpus.Visibility.values, required=False)
    readable_groups = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=GROUP_ID_MAX), required=False, max_length=1000,
        help_text="Ids of your groups that may read.")
    writable_groups = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=GROUP_ID_MAX), required=False, max_length=1000,
        help_text="Ids of your groups that may also write.")

    def get_fields(self) -> dict[str, serializers.Field]:
        return _with_settings(super().get_fields(), after="writable_groups", write=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        user = self.context["request"].user
        for field in ("readable_groups", "writable_groups"):
            if field in attrs:
                attrs[field] = _group_ids(attrs[field], user, field)
        staff_only = sorted(s.name for s in settings_declared() if s.staff_only and s.name in attrs)
        if staff_only and not user.is_staff:
            raise serializers.ValidationError({name: "Only staff may set this." for name in staff_only})
        return attrs


# The declared settings but the staff-only ones (a path on the server).
class CorpusSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    visibility = serializers.ChoiceField(choices=Corpus.Visibility.values)
    owner = serializers.CharField(source="owner.username")
    readable_groups = serializers.SerializerMethodField()
    writable_groups = serializers.SerializerMethodField()
    active_build = serializers.IntegerField(source="active_build_id", allow_null=True)
    active_appends = serializers.ListField(child=serializers.IntegerField(), help_text=(
        "Ids of the append segments searched on top of the active build, oldest first."))
    created = serializers.DateTimeField()
    updated = serializers.DateTimeField()

    def get_fields(self) -> dict[str, serializers.Field]:
        return _with_settings(super().get_fields(), after="writable_groups", write=False)

    def get_readable_groups(self, corpus: Corpus) -> list[int]:
        return sorted(g.pk for g in corpus.readable_groups.all())

    def get_writable_groups(self, corpus: Corpus) -> list[int]:
        return sorted(g.pk for g in corpus.writable_groups.all())


def _int_list(value: str, name: str) -> list[int]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not all(item.isdigit() and len(item) <= 18 for item in items) or len(items) > 1000:
        raise serializers.ValidationError({name: "A comma-separated list of ids, e.g. 1,2."})
    return [int(item) for item in items]


class SearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(max_length=2000, help_text="The query text.")
    datasets = serializers.CharField(
        required=False, help_text="Comma-separated dataset ids to search (default all enabled)."
    )
    budget = serializers.IntegerField(min_value=1, max_value=MAX_TOKEN_BUDGET, required=False,
                                      help_text="Most tokens of memories returned (pipeline mode).")
    mode = serializers.ChoiceField(
        choices=["pipeline", "raw"],
        default="pipeline",
        help_text="pipeline: threshold, fusion, MMR within the budget (what the chat "
        "uses); raw: the index's top `limit` rows by HDC score.",
    )
    limit = serializers.IntegerField(
        min_value=1,
        max_value=1000,
        default=50,
        help_text="At most this many results, in either mode (pipeline mode: only when given).",
    )
    top_document = serializers.BooleanField(default=False, help_text="Only the best memory (pipeline mode).")

    def validate_datasets(self, value: str) -> list[int]:
        return _int_list(value, "datasets")


class MultiSearchQuerySerializer(SearchQuerySerializer):
    corpora = serializers.CharField(required=False, help_text="Comma-separated corpus ids (default: every "
                                                              "readable corpus with an index).")

    def validate_corpora(self, value: str) -> list[int]:
        return _int_list(value, "corpora")


class CompletionMemorySerializer(ResultPlaceFields):
    """A memory that primed an OpenAI-compatible completion: a search result's where and how much."""

    id = serializers.IntegerField(source="memory.memory_id", allow_null=True,
                                  help_text="Memory id: GET memories/{id}/ for its full text.")
    corpus = serializers.IntegerField(source="corpus_id")
    corpus_name = serializers.CharField()
    dataset = serializers.IntegerField(source="dataset_id", allow_null=True)
    dataset_name = serializers.CharField(allow_blank=True)
    score = serializers.FloatField(source="hdc_score", help_text="HDC score.")
    token_count = serializers.IntegerField(source="memory.token_count")


class MemoryResultSerializer(CompletionMemorySerializer):
    """A search result (`memory.services.MemoryResult`): "corpus" and "dataset" are primary keys,
    "corpus_name" and "dataset_name" their names, "id" the memory row's and "key" its content hash."""

    key = serializers.CharField(source="memory.content_hash", help_text="Content hash.")
    late_score = serializers.FloatField(allow_null=True,
                                        help_text="The second ranker's score, where the corpus fuses one.")
    late_kind = serializers.ChoiceField(
        choices=["maxsim", "bm25"],
        allow_null=True,
        help_text="What late_score is: late-interaction MaxSim, or BM25 over words.",
    )
    meaning_score = serializers.FloatField(allow_null=True, help_text=(
        "The meaning channel's cosine of the memory with the question, where its corpus has the channel."))
    fused_score = serializers.FloatField(
        allow_null=True, help_text="1 / (60 + rank) in the fused or merged ranking."
    )
    merge_score = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Several corpora searched together: the key they are merged by, the HDC score (of the result's "
            "rank in its corpus) per unit of the query's length in that corpus (results come in this order)."
        ),
    )
    text = serializers.CharField(source="memory.text")
    metadata = serializers.JSONField(source="memory.metadata")


class SearchResponseSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    took_ms = serializers.FloatField(help_text="The search's own time in ms (also the Server-Timing header).")
    results = MemoryResultSerializer(many=True)


class MemorySerializer(RowPlaceFields):
    id = serializers.IntegerField()
    key = serializers.CharField(source="content_hash")
    corpus = serializers.IntegerField(source="corpus_id")
    build = serializers.IntegerField(source="build_id")
    dataset = serializers.IntegerField(source="dataset_id", allow_null=True)
    dataset_name = serializers.SerializerMethodField()
    hdv_idx = serializers.IntegerField()
    token_count = serializers.IntegerField()
    text = serializers.CharField()
    metadata = serializers.JSONField()
    active = serializers.SerializerMethodField(help_text="In the corpus's serving build.")

    def get_dataset_name(self, memory: Any) -> str:
        return memory.dataset.name if memory.dataset else ""

    def get_active(self, memory: Any) -> bool:
        return memory.build_id in memory.corpus.serving_build_ids


class ConversationWriteSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    corpora = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=ROW_ID_MAX), required=False, max_length=100
    )
    use_memory = serializers.BooleanField(required=False)
    top_document = serializers.BooleanField(required=False)
    compress_context = serializers.BooleanField(required=False)
    token_budget = serializers.IntegerField(min_value=1, max_value=MAX_TOKEN_BUDGET, required=False)
    temperature = serializers.FloatField(
        min_value=0,
        max_value=2,
        required=False,
        allow_null=True,
        help_text="The answers' sampling temperature; null: the model's default.",
    )
    model = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="The LLM model that answers (GET /api/v1/models); blank: the default.",
    )


class MessageSendSerializer(serializers.Serializer):
    content = serializers.CharField(max_length=MAX_MESSAGE_CHARS, help_text="The user's turn.")
    stream = serializers.BooleanField(
        default=False, help_text="Server-Sent Events instead of one JSON reply."
    )


@extend_schema_field(MessageSerializer)
class SentMessageField(serializers.Field):
    """A message as the turn sent it (`chat.turns.TurnResult`: `MessageSerializer`'s output, which
    the turn's events carry too), passed on unchanged."""

    def to_representation(self, value: dict[str, Any]) -> dict[str, Any]:
        return value


class TurnSerializer(serializers.Serializer):
    """A whole turn's reply, from the `chat.turns.TurnResult` of a turn that did not fail."""

    status = serializers.ChoiceField(choices=[s for s in Message.Status.values if s != "error"])
    user_message = SentMessageField()
    message = SentMessageField()


class ChatMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant"])
    content = serializers.JSONField(help_text="A string, or a list of {type: text, text} parts.")


class ChatCompletionRequestSerializer(serializers.Serializer):
    model = serializers.CharField(
        max_length=300,
        help_text=(
            "none or corpus-<id>, optionally followed by @<llm model> (GET /api/v1/models); bare: your "
            "default LLM model."
        ),
    )
    messages = serializers.ListField(child=ChatMessageSerializer(), min_length=1, max_length=1000)
    stream = serializers.BooleanField(default=False)
    temperature = serializers.FloatField(min_value=0, max_value=2, required=False, allow_null=True)
    top_p = serializers.FloatField(min_value=0.01, max_value=1, required=False, allow_null=True)
    max_tokens = serializers.IntegerField(min_value=1, max_value=1 << 20, required=False, allow_null=True)
    max_completion_tokens = serializers.IntegerField(
        min_value=1, max_value=1 << 20, required=False, allow_null=True
    )
    stream_options = serializers.DictField(
        required=False, allow_null=True, help_text='{"include_usage": true}: a last chunk with the usage.'
    )
    # A conversation's retrieval settings (extra fields, as the clients' `extra_body` sends them): the
    # same values prepare the same turn as in a conversation (`chat.preparation`).
    token_budget = serializers.IntegerField(
        min_value=1,
        max_value=MAX_TOKEN_BUDGET,
        required=False,
        help_text="Memory tokens asked for, as a conversation's (default 512).",
    )
    top_document = serializers.BooleanField(
        required=False, help_text="Only the best memory, as a conversation's."
    )
    compress_context = serializers.BooleanField(required=False, help_text=(
        "Each memory without its words more frequent than its median word, as a conversation's."))

    def validate_messages(self, value: list[dict]) -> list[dict]:
        total = 0
        for message in value:
            content = message["content"]
            total += len(content) if isinstance(content, str) else len(str(content))
        if total > 50 * MAX_MESSAGE_CHARS:
            raise serializers.ValidationError("The messages are too long.")
        return value


class ModelSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField()
    created = serializers.IntegerField()
    owned_by = serializers.CharField()
    description = serializers.CharField()


class ModelListSerializer(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = ModelSerializer(many=True)


class CompletionMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["assistant"])
    content = serializers.CharField(allow_blank=True)


class CompletionChoiceSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    message = CompletionMessageSerializer()
    finish_reason = serializers.CharField(
        help_text="stop, or length (cut by max_tokens, or an answer that looped)."
    )


class CompletionUsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class AnswerCheckSerializer(serializers.Serializer):
    """The answer checked against its memories (`chat.citations`); also on the streamed chunk with
    the finish reason, and on the usage chunk after it."""

    grounding = serializers.FloatField(allow_null=True, min_value=0, max_value=1, help_text=(
        "Share of the claim sentences a memory supports; null: nothing to check."))
    grounding_word = serializers.ChoiceField(choices=["grounded", "partly", "not grounded", ""])
    citations = CitationSerializer(many=True, help_text=(
        "The answer's sentences; each one's `memories` index the reply's `memories`, best first."))


class ChatCompletionSerializer(serializers.Serializer):
    """A `chat.completion`: OpenAI's shape, plus the memories that primed it and the answer's check."""

    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["chat.completion"])
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = CompletionChoiceSerializer(many=True)
    usage = CompletionUsageSerializer()
    memories = CompletionMemorySerializer(
        many=True, help_text="The memories that primed the answer, best first."
    )
    hdrag = AnswerCheckSerializer()
