from __future__ import annotations

from django.urls import path

from memory import views

app_name = "memory"

urlpatterns = [
    path("search/", views.search, name="search"),
    path("<int:pk>/", views.memory_detail, name="detail"),
    path("<int:pk>/document/", views.memory_in_document, name="in_document"),
    path("corpora/<int:pk>/stats/", views.stats, name="stats"),
]
