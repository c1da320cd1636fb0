"""HTTP on a user's behalf under the outbound policy (core.outbound), with `requests`: each request
connects to the address the policy checked for its host, at the moment it is sent, while the Host
header, TLS SNI and the certificate check keep the URL's host name. No proxy of the environment is
used: a proxy would connect on its own, to whatever it resolves, past the check."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from core.outbound import connect_address

DEFAULT_PORTS = {"http": 80, "https": 443}


class PinnedAdapter(HTTPAdapter):
    """Resolves and checks the request's host, then hands urllib3 the checked address as the pool's
    host (requests documents `build_connection_pool_key_attributes` for this kind of override);
    `server_hostname` and `assert_hostname` are urllib3's pool arguments for TLS on an address."""

    def build_connection_pool_key_attributes(self, request: requests.PreparedRequest, verify: Any,
                                             cert: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        host, scheme = host_params["host"], host_params["scheme"]
        port = host_params["port"] or DEFAULT_PORTS[scheme]
        address = connect_address(host=host, port=port)
        if scheme == "https":
            pool_kwargs = {**pool_kwargs, "server_hostname": host, "assert_hostname": host}
        return {**host_params, "host": address, "port": port}, pool_kwargs

    def add_headers(self, request: requests.PreparedRequest, **kwargs: Any) -> None:
        # The connection is to an address; the server still sees the URL's host.
        request.headers["Host"] = urlsplit(request.url).netloc.rpartition("@")[2]


def pinned_session() -> requests.Session:
    """A session for http(s) only, every connection checked and pinned, no environment proxy."""
    session = requests.Session()
    session.trust_env = False
    adapter = PinnedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
