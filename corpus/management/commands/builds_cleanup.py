from __future__ import annotations

from django.core.management.base import BaseCommand

from corpus.services.builds import builds_cleanup


class Command(BaseCommand):
    help = ("Delete finished builds (files and memory rows) beyond the newest --keep per corpus; never the "
            "active one.")

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--keep", type=int, default=2, help="Finished builds kept per corpus (default 2)."
        )

    def handle(self, *args, keep: int, **options) -> None:
        if keep < 0:
            raise ValueError("--keep must be >= 0")
        deleted = builds_cleanup(keep=keep)
        self.stdout.write(f"deleted builds: {deleted or 'none'}")
