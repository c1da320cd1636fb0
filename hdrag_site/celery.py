"""The Celery app. Workers: `celery -A hdrag_site worker` (broker from settings: Redis or local files)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")

app = Celery("hdrag_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
