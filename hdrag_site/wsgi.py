"""WSGI entry point (HTTP only; the portal normally runs on ASGI for its websockets)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")
application = get_wsgi_application()
