from __future__ import annotations

from django.urls import path

from corpus import document_views, sharing_views, views
from corpus.sources import views as source_views

app_name = "corpus"

urlpatterns = [
    path("", views.corpus_list, name="list"),
    path("new/", views.corpus_new, name="new"),
    path("<int:pk>/", views.corpus_detail, name="detail"),
    path("<int:pk>/edit/", views.corpus_edit, name="edit"),
    path("<int:pk>/delete/", views.corpus_remove, name="delete"),
    path("<int:pk>/share/", sharing_views.share_add, name="share_add"),
    path("<int:pk>/share/remove/", sharing_views.share_remove, name="share_remove"),
    path("<int:pk>/visibility/", sharing_views.visibility_set, name="visibility"),
    path("<int:pk>/datasets/", views.dataset_add, name="dataset_add"),
    path("<int:pk>/builds/", views.build_new, name="build_start"),
    path("<int:pk>/builds/status.json", views.build_status, name="build_status"),
    path("<int:pk>/store/", views.store_document_list, name="store_documents"),
    path("<int:pk>/store/delete/", views.store_document_remove, name="store_document_delete"),
    path("<int:pk>/documents/<int:document_id>/", document_views.document_view, name="document"),
    path("<int:pk>/documents/<int:document_id>/pages/<int:page>.png", document_views.document_page,
         name="document_page"),
    path("<int:pk>/documents/<int:document_id>/original/", document_views.document_original,
         name="document_original"),
    path("datasets/<int:pk>/toggle/", views.dataset_toggle, name="dataset_toggle"),
    path("datasets/<int:pk>/delete/", views.dataset_remove, name="dataset_delete"),
    path("datasets/<int:pk>/readers/", views.dataset_readers, name="dataset_readers"),
    path("builds/<int:pk>/cancel/", views.build_stop, name="build_cancel"),
    path("<int:pk>/sources/", source_views.source_add, name="source_add"),
    path("<int:pk>/sources/status.json", source_views.source_status, name="source_status"),
    path("sources/<int:pk>/sync/", source_views.source_sync, name="source_sync"),
    path("sources/<int:pk>/delete/", source_views.source_remove, name="source_delete"),
]
