"""A portal on its own "machine" (DATA_DIR, database, object store) driven through real commands
in child processes: `manage.py` and tests/corpus/backup_scenario.py (backup and upgrade tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "corpus" / "backup_scenario.py"


class Portal:
    """One machine's portal: its DATA_DIR, database and object store, driven by real commands."""

    def __init__(self, data_dir: Path, database_url: str = "", store: dict[str, str] | None = None) -> None:
        self.data_dir, self.database_url = data_dir, database_url
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", "DATA_DIR": str(data_dir),
                    "DATABASE_URL": database_url, "INDEX_ON_UPLOAD": "0", "SEGMENT_MERGE_PERCENT": "1000",
                    "BUILD_STORAGE_URL": "", "MEANING_CHANNEL_DEFAULT": "0", **(store or {})}
        self.env.pop("REDIS_URL", None)  # jobs run in the command's own process (Celery eager)
        # A corpus gets the meaning channel where a scenario asks for it (`make --meaning`), as in the
        # in-process tests (tests/plugins/portal.py): without it a process loads no encoder.

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=600
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"{' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}", pytrace=False
            )
        return result

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("manage.py", *args, check=check)

    def scenario(self, *args: str) -> dict:
        return json.loads(self.run(str(SCENARIO), *args).stdout.strip().splitlines()[-1])
