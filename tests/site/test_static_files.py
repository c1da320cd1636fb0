"""Static files through the real ASGI application: whole, and without Django's warning about a
synchronous iterator on every first load (issue 31.6)."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
async def test_a_static_file_streams_whole_without_a_warning():
    from hdrag_site.asgi import application

    expected = (REPO / "static" / "css" / "portal.css").read_bytes()
    transport = httpx.ASGITransport(app=application)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            response = await client.get("/static/css/portal.css")
    assert response.status_code == 200 and response.content == expected
    assert not [w for w in caught if "synchronous iterators" in str(w.message)], [
        str(w.message) for w in caught
    ]
