"""HTTPS under the outbound policy (core.outbound_http): the session connects to the address the
policy checked for a host name, while TLS still speaks to that name (SNI) and checks the certificate
against it, and the server sees the name in Host. A real TLS server on loopback with a certificate
made here for a test name, which the tests' resolver maps to 127.0.0.1 (tests/plugins/outbound.py)."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core.outbound import OutboundRefused
from core.outbound_http import pinned_session

NAME = "wiki.corp.test"


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class _Server:
    """A TLS server on 127.0.0.1 that records the SNI names and Host headers it was sent."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.names: list[str | None] = []
        self.hosts: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.hosts.append(self.headers.get("Host", ""))
                body = b"<html><body>The wiki page.</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.sni_callback = lambda sock, name, ctx: self.names.append(name)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tls(tmp_path) -> Iterator[tuple[_Server, Path]]:
    cert, key = _certificate(tmp_path, NAME)
    server = _Server(cert, key)
    try:
        yield server, cert
    finally:
        server.close()


def test_a_name_is_connected_at_its_checked_address_with_its_own_sni_host_and_certificate(tls, names,
                                                                                         allow_loopback):
    server, cert = tls
    names[NAME] = ["127.0.0.1"]
    response = pinned_session().get(f"https://{NAME}:{server.port}/page", verify=str(cert), timeout=10)
    assert response.status_code == 200 and "The wiki page." in response.text
    assert server.names == [NAME] and server.hosts == [f"{NAME}:{server.port}"]


def test_a_certificate_for_another_name_is_refused(tmp_path, names, allow_loopback):
    cert, key = _certificate(tmp_path, "other.corp.test")
    server = _Server(cert, key)
    try:
        names[NAME] = ["127.0.0.1"]
        with pytest.raises(requests.exceptions.SSLError):
            pinned_session().get(f"https://{NAME}:{server.port}/page", verify=str(cert), timeout=10)
        assert server.hosts == []  # the handshake failed: no request reached it
    finally:
        server.close()


def test_a_name_the_policy_refuses_is_never_connected_to(tls, names):
    server, cert = tls
    names[NAME] = ["127.0.0.1"]  # loopback, and loopback is not allowed here
    with pytest.raises(OutboundRefused):
        pinned_session().get(f"https://{NAME}:{server.port}/page", verify=str(cert), timeout=10)
    assert server.names == [] and server.hosts == []
