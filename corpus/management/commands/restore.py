"""`manage.py restore DIR`: a backup into an empty database and a fresh DATA_DIR, then checked."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from corpus.backups import BackupError
from corpus.restores import backup_restore


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` into an empty database and DATA_DIR (migrates first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path)

    def handle(self, *args: object, directory: Path, **options: object) -> None:
        try:
            broken = backup_restore(directory=directory)
        except BackupError as error:
            raise CommandError(error.message) from error
        for report in broken:
            self.stderr.write(report.summary())
        if broken:
            raise CommandError(f"restored, but {len(broken)} corpora lack files (above): the backup did not "
                               "hold them; their pages say what to rebuild or upload again")
        self.stdout.write(f"restored {directory}; every corpus's files checked")
