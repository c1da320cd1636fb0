from __future__ import annotations

from django.urls import path

from accounts import group_views

app_name = "groups"

urlpatterns = [
    path("", group_views.group_list, name="list"),
    path("new/", group_views.group_new, name="new"),
    path("<int:pk>/", group_views.group_detail, name="detail"),
    path("<int:pk>/members/", group_views.group_member_add, name="member_add"),
    path("<int:pk>/members/remove/", group_views.group_member_remove, name="member_remove"),
]
