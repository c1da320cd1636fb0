"""Every test here runs in a DATA_DIR of its own with Celery tasks inline (tests/plugins/portal.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def portal_data(data_dir, celery_eager) -> None:  # noqa: ANN001 - fixtures
    """The portal's per-test DATA_DIR and inline tasks, before the tests' own fixtures."""
