"""Mounted at accounts/. allauth's flows redirect to some pages by their allauth names
(account_login, account_inactive, account_signup): those lead to the portal's own pages."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.generic import RedirectView

from accounts.oidc import views

to_login = login_not_required(RedirectView.as_view(pattern_name="login"))

urlpatterns = [
    path("oidc/<str:provider_id>/login/", views.sso_login, name="openid_connect_login"),
    path("oidc/<str:provider_id>/login/callback/", views.sso_callback, name="openid_connect_callback"),
    path("sso/", include("allauth.socialaccount.urls")),
    path("sso/login/", to_login, name="account_login"),
    path("sso/signup/", to_login, name="account_signup"),
    path("sso/inactive/", views.account_inactive, name="account_inactive"),
]
