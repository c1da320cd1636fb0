"""/api/v1/ (the public contract), /api/schema/ (OpenAPI 3) and /api/docs/ (Swagger UI, vendored)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from api.errors import not_found
from api.views import audit, conversations, corpora, feedback, openai, search, sources, store, usage


def _api(view_class: type) -> object:
    # The API authenticates by itself (token or session) and answers 401 in its own shape; the
    # site's LoginRequiredMiddleware would redirect to the login page instead.
    return login_not_required(view_class.as_view())


v1 = [
    path("corpora/", _api(corpora.CorpusList), name="corpora"),
    path("corpora/<int:corpus_id>/", _api(corpora.CorpusDetail), name="corpus"),
    path("corpora/<int:corpus_id>/datasets/", _api(corpora.DatasetList), name="datasets"),
    path("corpora/<int:corpus_id>/datasets/<int:dataset_id>/", _api(corpora.DatasetDetail), name="dataset"),
    path("corpora/<int:corpus_id>/builds/", _api(corpora.BuildList), name="builds"),
    path("builds/<int:build_id>/", _api(corpora.BuildDetail), name="build"),
    path("builds/<int:build_id>/cancel/", _api(corpora.BuildCancel), name="build_cancel"),
    path("corpora/<int:corpus_id>/sources/", _api(sources.SourceList), name="sources"),
    path("sources/<int:source_id>/", _api(sources.SourceDetail), name="source"),
    path("sources/<int:source_id>/sync/", _api(sources.SourceSync), name="source_sync"),
    path("corpora/<int:corpus_id>/search/", _api(search.CorpusSearch), name="corpus_search"),
    path("search/", _api(search.Search), name="search"),
    path("memories/<int:memory_id>/", _api(search.MemoryDetail), name="memory"),
    path("conversations/", _api(conversations.ConversationList), name="conversations"),
    path("conversations/<int:conversation_id>/", _api(conversations.ConversationDetail), name="conversation"),
    path("conversations/<int:conversation_id>/messages/", _api(conversations.MessageList), name="messages"),
    path(
        "conversations/<int:conversation_id>/export/", _api(conversations.ConversationExport), name="export"
    ),
    path(
        "conversations/<int:conversation_id>/messages/<int:message_id>/feedback/",
        _api(feedback.MessageFeedback),
        name="message_feedback",
    ),
    path("feedback/", _api(feedback.FeedbackList), name="feedback"),
    path("audit/", _api(audit.AuditList), name="audit"),
    path("usage/", _api(usage.Usage), name="usage"),
    path("corpora/<int:corpus_id>/store/", _api(store.StoreStats), name="store"),
    path("corpora/<int:corpus_id>/store/pages/", _api(store.StorePages), name="store_pages"),
    path("corpora/<int:corpus_id>/store/chunks/", _api(store.StoreChunks), name="store_chunks"),
    path("corpora/<int:corpus_id>/store/batch/", _api(store.StoreBatch), name="store_batch"),
    path("corpora/<int:corpus_id>/store/search/", _api(store.StoreSearch), name="store_search"),
    path(
        "corpora/<int:corpus_id>/store/search/multivector/",
        _api(store.StoreMultiSearch),
        name="store_search_multivector",
    ),
    path(
        "corpora/<int:corpus_id>/store/embeddings/<str:embedding_id>/",
        _api(store.StoreEmbeddings),
        name="store_embeddings",
    ),
    path("corpora/<int:corpus_id>/store/documents/", _api(store.StoreDocuments), name="store_documents"),
    path(
        "corpora/<int:corpus_id>/store/documents/<str:doc_id>/",
        _api(store.StoreDocument),
        name="store_document",
    ),
    # OpenAI clients join paths without trailing slashes.
    path("models", _api(openai.ModelList), name="models"),
    path("models/<path:model_id>", _api(openai.ModelDetail), name="model"),
    path("chat/completions", _api(openai.ChatCompletions), name="chat_completions"),
]

urlpatterns = [
    path("schema/", login_not_required(SpectacularAPIView.as_view()), name="schema"),
    # The split view serves Swagger UI's start-up script as a file (docs/?script=), not inline, so the
    # pages' Content-Security-Policy (no inline code) lets it run; the template has no inline style.
    path(
        "docs/", login_not_required(SpectacularSwaggerSplitView.as_view(url_name="api:schema")), name="docs"
    ),
    path("v1/", include(v1)),
    re_path(r"^.*$", login_not_required(not_found)),
]
