from __future__ import annotations

from django.core.management.base import BaseCommand

from corpus.services.build_liveness import builds_sweep_stale


class Command(BaseCommand):
    help = "Mark running builds whose worker stopped sending heartbeats as failed (BUILD_STALE_SECONDS)."

    def handle(self, *args, **options) -> None:
        swept = builds_sweep_stale()
        self.stdout.write(f"stale builds marked failed: {swept or 'none'}")
