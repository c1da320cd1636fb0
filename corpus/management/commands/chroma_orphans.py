"""List (or drop, with --drop) Chroma collections of corpora that no longer exist."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from corpus.services.multivector import store_orphans, store_orphans_drop
from engine.multivector import StorageError


class Command(BaseCommand):
    help = ("List the portal's Chroma collections (hdrag_corpus<id>_visual/_text) whose corpus was deleted; "
            "--drop deletes them.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--drop", action="store_true", help="delete the orphan collections")

    def handle(self, *args, drop: bool = False, **options) -> None:
        try:
            orphans = store_orphans()
            if drop:
                store_orphans_drop(corpus_ids=sorted(orphans))
        except StorageError as error:
            raise CommandError(f"Chroma unavailable: {error}") from error
        for corpus_id, names in sorted(orphans.items()):
            self.stdout.write(f"corpus {corpus_id}: {', '.join(sorted(names))}{' (dropped)' if drop else ''}")
        self.stdout.write(f"{len(orphans)} deleted corpus(es) with collections left"
                          + ("; dropped" if drop and orphans else ""))
