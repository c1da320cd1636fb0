from __future__ import annotations

from django.contrib import admin

from chat.models import Conversation, Message, MessageMemory


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
