"""A real OpenID Connect provider for the tests: panva's `oidc-provider` (npm, 9.x) run by Node from
tests/oidc_provider/ (`npm ci` there installs it from its lockfile; `.ci/run` and `./portal test` do),
on loopback, one per session. PKCE is required, end_session is on. Fails (never skips) when Node or
the provider cannot start.

Its one client is registered for the portal at `portal_url` (a port chosen here, since the
provider must know the redirect URI before the portal starts). People and their claims live in a
JSON file read at every request: `set_user` changes someone's groups at the provider."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.llama_server import free_port
from tests.plugins.waiting import wait_for_server

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "oidc_provider"
START_S = 30.0
CLIENT_ID, CLIENT_SECRET = "hdrag-portal", "hdrag-test-client-secret-0123456789"
CALLBACK_PATH = "/accounts/oidc/sso/login/callback/"


@dataclass(frozen=True)
class OidcProvider:
    issuer: str
    portal_url: str  # where the provider's client expects the portal
    users_file: Path

    def users(self) -> dict[str, Any]:
        return json.loads(self.users_file.read_text())

    def set_user(self, sub: str, *, password: str, **claims: Any) -> None:
        """Add or replace a person at the provider (claims: email, email_verified, groups, ...)."""
        users = self.users()
        users[sub] = {"password": password, "claims": {"preferred_username": sub, **claims}}
        self.users_file.write_text(json.dumps(users))

    def portal_env(self, **overrides: str) -> dict[str, str]:
        """The portal's environment to sign in through this provider."""
        return {
            "OIDC_DISCOVERY_URL": self.issuer,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_PROVIDER_NAME": "Test IdP",
            **overrides,
        }


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is missing: the sign-in tests run a real OpenID Connect provider on Node (apt-get install "
            "nodejs npm)",
            pytrace=False,
        )
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail(f"oidc-provider is not installed: run `npm ci` in {PROVIDER_DIR}", pytrace=False)
    return node


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    node = _node()
    root = tmp_path_factory.mktemp("oidc")
    port, portal_port = free_port(), free_port()
    issuer, portal_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{portal_port}"
    users_file = root / "users.json"
    users_file.write_text("{}")
    config = {
        "port": port,
        "issuer": issuer,
        "users_file": str(users_file),
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [portal_url + CALLBACK_PATH],
                "post_logout_redirect_uris": [portal_url + "/accounts/login/"],
                "response_types": ["code"],
                "grant_types": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_method": "client_secret_post",
            }
        ],
    }
    (root / "config.json").write_text(json.dumps(config))
    log_path = root / "provider.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [node, "server.mjs", str(root / "config.json")],
            cwd=PROVIDER_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_server(server, port, name="oidc-provider", log_path=log_path, timeout=START_S)
        yield OidcProvider(issuer, portal_url, users_file)
    finally:
        server.terminate()
        server.wait(timeout=10)
