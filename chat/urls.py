from __future__ import annotations

from django.urls import path

from chat import views

app_name = "chat"

urlpatterns = [
    path("", views.chat_index, name="index"),
    path("new/", views.conversation_new, name="new"),
    path("feedback/", views.feedback_page, name="feedback"),
    path("usage/", views.usage_page, name="usage"),
    path("usage/export.csv", views.usage_download, name="usage_csv"),
    path("feedback/export.csv", views.feedback_download, {"fmt": "csv"}, name="feedback_csv"),
    path("feedback/export.jsonl", views.feedback_download, {"fmt": "jsonl"}, name="feedback_jsonl"),
    path("<int:pk>/", views.conversation_detail, name="detail"),
    path("<int:pk>/settings/", views.conversation_settings, name="settings"),
    path("<int:pk>/rename/", views.conversation_rename, name="rename"),
    path("<int:pk>/reset-blend/", views.conversation_reset_blend, name="reset_blend"),
    path("<int:pk>/delete/", views.conversation_remove, name="delete"),
    path("<int:pk>/export.jsonl", views.conversation_export, {"fmt": "jsonl"}, name="export_jsonl"),
    path("<int:pk>/export.md", views.conversation_export, {"fmt": "md"}, name="export_markdown"),
]
