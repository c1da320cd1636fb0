"""End-to-end flows. The worker and first-hour flows run in a DATA_DIR of their own with Celery
tasks inline (tests/plugins/portal.py); the browser flows (browser/) drive a live portal of their own."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def portal_data(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("browser") is None:
        request.getfixturevalue("data_dir")
        request.getfixturevalue("celery_eager")
