"""drf-spectacular extensions: how the bearer token appears in the schema (loaded in apps.ready)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: object) -> dict:
        return {"type": "http", "scheme": "bearer",
                "description": "An API token from /accounts/tokens/ or `manage.py api_token create`."}
