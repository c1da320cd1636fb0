"""`manage.py backup DIR`: the database and the files it needs, consistent while the portal serves."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from corpus.backups import BackupError, backup_create


class Command(BaseCommand):
    help = "Back up the database, the uploads and the serving index segments into DIR (new or empty)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path)

    def handle(self, *args: object, directory: Path, **options: object) -> None:
        try:
            manifest = backup_create(directory=directory)
        except BackupError as error:
            raise CommandError(error.message) from error
        files = sum(len(b["files"]) for b in manifest["builds"].values()) + len(manifest["datasets"])
        self.stdout.write(f"backup of {len(manifest['corpora'])} corpora, {len(manifest['builds'])} serving "
                          f"segments and {len(manifest['datasets'])} datasets ({files} files) in {directory}")
        for problem in manifest["problems"]:
            self.stderr.write(f"warning: {problem}")
