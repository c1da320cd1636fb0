from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from corpus.models import Memory


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    """Read-only: memories are written by builds only."""

    list_display = ["id", "corpus", "build", "hdv_idx", "dataset", "token_count", "excerpt"]
    list_filter = ["corpus"]
    search_fields = ["text", "content_hash"]
    list_select_related = ["corpus", "build", "dataset"]
    show_full_result_count = False

    def excerpt(self, memory: Memory) -> str:
        return memory.text if len(memory.text) <= 80 else memory.text[:79] + "…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False
