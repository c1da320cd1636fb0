"""Every API test runs in a DATA_DIR of its own with Celery tasks inline and without the API's
throttle (which has its own tests): tests/plugins/portal.py, tests/plugins/api.py."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def portal_data(data_dir, celery_eager, no_throttle) -> None:  # noqa: ANN001 - fixtures
    """The portal's per-test DATA_DIR and inline tasks, before the tests' own fixtures."""
