"""The outbound policy in tests (core.outbound): a resolver that sends nothing, and the setting that
lets the tests' own loopback servers be sources.

Every test resolves names through `resolve`: numeric spellings as the system's resolver reads them
(`0x7f.1`, `2852039166`, `::ffff:127.0.0.1`: glibc, with no query), `localhost`, and the names a
test gives in `NAMES`; any other name does not resolve, so no DNS query leaves the machine. The
sources' default policy is production's: a test that serves a source on loopback allows it with
`allow_loopback`."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.test import override_settings

NAMES: dict[str, list[str]] = {}
LOCALHOST = ["127.0.0.1", "::1"]


def resolve(host: str, port: int) -> list[str]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        return [info[4][0] for info in found]
    except socket.gaierror:
        pass
    if host == "localhost":
        return list(LOCALHOST)
    if host in NAMES:
        return list(NAMES[host])
    raise socket.gaierror(socket.EAI_NONAME, "not a name these tests resolve")


@pytest.fixture(autouse=True)
def offline_resolver() -> Iterator[None]:
    with override_settings(OUTBOUND_RESOLVER="tests.plugins.outbound.resolve"):
        yield
    NAMES.clear()


@pytest.fixture
def names() -> dict[str, list[str]]:
    """Host names this test resolves: {name: [addresses]} (emptied after the test)."""
    return NAMES


@pytest.fixture
def allow_loopback(settings) -> None:  # noqa: ANN001 - pytest-django's settings
    """The tests' servers listen on loopback, which the policy refuses unless allowed."""
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1"]
