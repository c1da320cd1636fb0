from __future__ import annotations

from django.urls import path

from corpus import sharing_views

app_name = "groups"

urlpatterns = [
    path("", sharing_views.group_list, name="list"),
    path("new/", sharing_views.group_new, name="new"),
    path("<int:pk>/", sharing_views.group_detail, name="detail"),
    path("<int:pk>/members/", sharing_views.group_member_add, name="member_add"),
    path("<int:pk>/members/remove/", sharing_views.group_member_remove, name="member_remove"),
]
