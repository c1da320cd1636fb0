"""`manage.py check_restore`: whether every corpus's rows and files agree (after a restore, or any time)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from corpus.integrity import corpora_files_reports


class Command(BaseCommand):
    help = ("Check that every serving segment's files are here (or in the object store) with the size and "
            "sha256 recorded, its memory rows complete, its model present, and every dataset's upload kept.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quick", action="store_true", help="Only look for the files (no checksums, no store).")

    def handle(self, *args: object, quick: bool = False, **options: object) -> None:
        broken = corpora_files_reports(deep=not quick)
        for report in broken:
            self.stderr.write(f"corpus {report.corpus_id} ({report.name!r}) cannot serve: {'; '.join(report.lines())}")
        if broken:
            raise CommandError(f"{len(broken)} corpora cannot serve; rebuild each from its page, or restore its files")
        self.stdout.write("every corpus's rows and files agree")
