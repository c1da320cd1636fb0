from __future__ import annotations

from django.contrib import admin

from chat.llm.clients import server_pool
from chat.models import Conversation, LLMModel, Message, MessageMemory


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ("role", "status", "content", "prompt_tokens", "completion_tokens", "created")
    readonly_fields = fields
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "owner", "use_memory", "token_budget", "updated")
    list_filter = ("use_memory", "top_document", "compress_context")
    search_fields = ("title", "owner__username")
    raw_id_fields = ("owner",)
    filter_horizontal = ("corpora",)
    readonly_fields = ("blend_state", "created", "updated")
    inlines = [MessageInline]


class MessageMemoryInline(admin.TabularInline):
    model = MessageMemory
    extra = 0
    fields = ("rank", "score", "corpus_name", "source", "memory", "excerpt")
    readonly_fields = fields
    raw_id_fields = ("memory",)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("conversation", "role", "status", "created", "completion_tokens")
    list_filter = ("role", "status")
    search_fields = ("content", "conversation__title")
    raw_id_fields = ("conversation",)
    inlines = [MessageMemoryInline]


@admin.register(LLMModel)
class LLMModelAdmin(admin.ModelAdmin):
    """The default LLM model and which groups may use each model (`chat.model_rights`)."""

    list_display = ("name", "is_default", "group_names", "served")
    list_filter = ("is_default",)
    search_fields = ("name",)
    filter_horizontal = ("groups",)

    def get_queryset(self, request):  # Django's signature
        return super().get_queryset(request).prefetch_related("groups")

    @admin.display(description="groups (none: every user)")
    def group_names(self, row: LLMModel) -> str:
        return ", ".join(group.name for group in row.groups.all()) or "every user"

    @admin.display(boolean=True, description="served now")
    def served(self, row: LLMModel) -> bool:
        return row.name in server_pool().models

    def get_form(self, request, obj=None, change=False, **kwargs):  # Django's signature
        form = super().get_form(request, obj, change, **kwargs)
        form.base_fields["name"].help_text = "Served now: " + ", ".join(server_pool().models) + "."
        return form
