from __future__ import annotations

from hdrag_site.celery import app as celery_app

__all__ = ["celery_app"]
