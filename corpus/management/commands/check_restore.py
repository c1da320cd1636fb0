"""`manage.py check_restore`: whether every corpus's rows and files agree (after a restore, or any time)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from corpus.integrity import corpora_files_reports


class Command(BaseCommand):
    help = ("Check that every serving segment's files are here (or in the object store) with the size and "
            "sha256 recorded, its memory rows complete, its model present, and every dataset's upload kept "
            "(here, or in the object store, with its size).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--quick", action="store_true", help="Only look for the files (no checksums, no store)."
        )

    def handle(self, *args: object, quick: bool = False, **options: object) -> None:
        broken = corpora_files_reports(deep=not quick)
        for report in broken:
            self.stderr.write(report.summary())
        if broken:
            raise CommandError(f"{len(broken)} corpora lack files (above): restore them, rebuild a corpus "
                               "that cannot serve from its page, or upload a lost dataset again")
        self.stdout.write("every corpus's rows and files agree")
