from __future__ import annotations

from pathlib import Path

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def _engine_settings_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """`manage.py check` (and migrate, which `./portal run` starts with) refuses bad engine settings."""
    from core import runtime

    try:
        runtime.check_engine_settings()
    except ImproperlyConfigured as error:
        return [checks.Error(str(error), hint="Fix the setting or the YAML file it names.", id="hdrag.E001")]
    return []


class CorpusConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "corpus"
    verbose_name = "Corpora"

    def ready(self) -> None:
        from django.conf import settings

        from core import sockets  # noqa: F401 - closes a session's sockets at logout
        from core.metrics import REGISTRY
        from corpus import (
            document_access,  # noqa: F401 - keeps Dataset.restricted true to its readers
            signals,  # noqa: F401 - connects the receivers
            tasks,  # noqa: F401 - registers the build task in every process (queued by name)
        )
        from corpus.integrity import corpora_files_check
        from corpus.metrics import BuildsCollector

        checks.register(_engine_settings_check)
        REGISTRY.register(BuildsCollector())
        checks.register(corpora_files_check, checks.Tags.database)

        # DATA_DIR holds the SQLite file, uploads (spooled here so accepting one is a rename),
        # the local broker's queue and the builds; create what a fresh DATA_DIR lacks.
        for directory in (settings.DATA_DIR, Path(settings.FILE_UPLOAD_TEMP_DIR)):
            Path(directory).mkdir(parents=True, exist_ok=True)
        transport = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        for key in ("data_folder_in", "processed_folder", "control_folder"):
            if key in transport:
                Path(transport[key]).mkdir(parents=True, exist_ok=True)
