"""First start: an admin account and the demo corpus (queued for a build). Safe to run again."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files import File
from django.core.management.base import BaseCommand
from django.db import transaction

from corpus.demo import pydoc_topics, stdlib_docstrings, write_jsonl
from corpus.models import Corpus
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create, dataset_upload

DEMO_NAME = "Python documentation"


class Command(BaseCommand):
    help = "Create the first admin (HDRAG_ADMIN_USER / HDRAG_ADMIN_PASSWORD) and the demo corpus."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-demo", action="store_true", help="Only the admin account.")
        parser.add_argument(
            "--no-build", action="store_true", help="Create the demo corpus without building it."
        )

    def handle(self, *args, no_demo: bool = False, no_build: bool = False, **options) -> None:
        admin = self._admin()
        if not no_demo:
            self._demo(admin, build=not no_build)

    def _admin(self):
        User = get_user_model()  # noqa: N806
        username = os.environ.get("HDRAG_ADMIN_USER", "admin")
        user = User.objects.filter(username=username).first()
        if user is not None:
            self.stdout.write(f"Admin account: {username} (exists; password unchanged)")
            return user
        password = os.environ.get("HDRAG_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
        note = Path(settings.DATA_DIR) / "admin-password.txt"
        if not os.environ.get("HDRAG_ADMIN_PASSWORD"):
            note.write_text(f"{username} {password}\n", encoding="utf-8")
            note.chmod(0o600)
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin account created: user {username!r}, password {password!r}"
                + ("" if os.environ.get("HDRAG_ADMIN_PASSWORD") else f" (also in {note})")
            )
        )
        return user

    def _demo(self, admin, *, build: bool) -> None:
        if Corpus.objects.filter(name=DEMO_NAME, owner=admin).exists():
            self.stdout.write(f"Demo corpus {DEMO_NAME!r} exists.")
            return
        with tempfile.TemporaryDirectory(dir=settings.FILE_UPLOAD_TEMP_DIR) as folder, transaction.atomic():
            corpus = corpus_create(owner=admin, name=DEMO_NAME, visibility=Corpus.Visibility.EVERYONE,
                                   description="The Python language reference topics (pydoc_data) and "
                                               "docstrings of the standard library, as shipped with Python.")
            for filename, records in (("python-language-reference.jsonl", pydoc_topics()),
                                      ("python-stdlib-docstrings.jsonl", stdlib_docstrings())):
                path = Path(folder) / filename
                count = write_jsonl(records, path)
                with open(path, "rb") as handle:
                    dataset_upload(corpus=corpus, user=admin, uploaded_file=File(handle, name=filename))
                self.stdout.write(f"  {filename}: {count} records")
            if build:
                started = build_start(corpus=corpus, user=admin)
                self.stdout.write(f"  build {started.pk} queued (the worker builds it now)")
        self.stdout.write(self.style.SUCCESS(f"Demo corpus {DEMO_NAME!r} created."))
