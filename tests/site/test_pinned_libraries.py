"""The private parts of pinned libraries the portal leans on (issue 30.6). There is no public way
to do these two things; each is pinned in requirements.txt and checked here, so that an upgrade
that changes one fails here, naming the library and the place to revisit, instead of failing
quietly (a Chroma call without a timeout, a server that never exits)."""

from __future__ import annotations

import inspect
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pinned(package: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if name.lower() == package.lower():
            return version.strip()
    raise AssertionError(f"{package} is not pinned in requirements.txt")


def test_chromadb_http_session_whose_timeout_the_client_sets():
    import chromadb
    from chromadb.api.fastapi import FastAPI

    assert chromadb.__version__ == _pinned("chromadb"), (
        "chromadb was upgraded: engine/multivector/client.py sets its HTTP timeout through "
        "client._server._session (an httpx.Client); check it still exists, then update the pin")
    assert "self._session = httpx.Client(" in inspect.getsource(FastAPI.__init__), (
        "chromadb's FastAPI client no longer keeps an httpx.Client in _session: "
        "engine/multivector/client.py can no longer bound its requests")


def test_xllamacpp_whose_server_destructor_the_llama_server_skips():
    assert metadata.version("xllamacpp") == _pinned("xllamacpp"), (
        "xllamacpp was upgraded: engine/llama_server.py ends with os._exit because the Server destructor "
        "of the pinned version could wait forever; check whether it still does, then update the pin")
    import xllamacpp

    assert hasattr(xllamacpp, "Server"), "xllamacpp has no Server (engine/llama_server.py)"
