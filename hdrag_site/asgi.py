"""ASGI entry point: HTTP through the body limit into Django (`hdrag_site.asgi_http`), websockets through the
same-origin check into Channels (chat, build progress)."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")
# Django must be set up before the routing modules import models (what get_asgi_application does).
django.setup(set_prefix=False)

from core import runtime  # noqa: E402

runtime.check_engine_settings()  # a bad setting stops the web process now, not at the first turn

from hdrag_site.asgi_http import SyncPathASGIHandler  # noqa: E402

django_asgi_app = SyncPathASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

import chat.routing  # noqa: E402
import corpus.routing  # noqa: E402
from core.bodylimit import BodyLimitMiddleware  # noqa: E402
from core.sockets import SameOriginValidator  # noqa: E402
from corpus.integrity import corpora_files_log_soon  # noqa: E402

# a database restored without its files is named at start (its pages offer a rebuild)
corpora_files_log_soon()

application = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(
                URLRouter(chat.routing.websocket_urlpatterns + corpus.routing.websocket_urlpatterns)
            )
        ),
    }
)
