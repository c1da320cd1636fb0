"""The Celery app. Workers: `celery -A hdrag_site worker` (broker from settings: Redis or local files)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")

app = Celery("hdrag_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _check_settings(**_: object) -> None:
    """A bad engine setting stops the worker when it starts, not at its first build."""
    from django.core.exceptions import ImproperlyConfigured

    from core import runtime

    try:
        runtime.check_engine_settings()
    except ImproperlyConfigured as error:
        # Celery logs and swallows a receiver's exceptions; SystemExit ends the worker, printing this.
        raise SystemExit(f"worker not started: {error}") from None
