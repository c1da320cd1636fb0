from __future__ import annotations

from django.urls import path

from accounts import token_views

app_name = "tokens"
urlpatterns = [
    path("", token_views.token_list, name="list"),
    path("<int:pk>/revoke/", token_views.token_revoke, name="revoke"),
]
