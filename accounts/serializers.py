"""The audit trail's shape as the API gives it (`GET /api/v1/audit/`)."""

from __future__ import annotations

from rest_framework import serializers


class AuditEventSerializer(serializers.Serializer):
    created = serializers.DateTimeField()
    actor = serializers.CharField(
        source="actor_name",
        allow_blank=True,
        help_text="The username then; empty: nobody signed in, or a scheduled task.",
    )
    action = serializers.CharField()
    target = serializers.CharField(allow_blank=True)
    address = serializers.IPAddressField(allow_null=True, help_text="The client's address (TRUSTED_PROXIES).")
    details = serializers.DictField()
