"""The outbound policy: which addresses a request made on a user's behalf (a source's web site,
Git remote or S3 endpoint) may connect to. docs/security.md, "What the portal fetches, and from
where".

Refused by default: loopback, link-local, private (RFC 1918, fc00::/7), carrier-grade NAT,
multicast, unspecified, broadcast and reserved addresses, and every IPv6 form that carries one of
them (IPv4-mapped and -compatible, 6to4, Teredo, NAT64). `SOURCE_ALLOWED_NETWORKS` lets an operator
allow networks, addresses and host names, each optionally on one port (`10.0.0.0/8`,
`192.168.1.20:8443`, `[fd00::5]:443`, `wiki.corp`, `*.corp.example`). Two kinds of address stay
refused unless an entry names them exactly: the cloud metadata addresses (the literal address or
its /32 or /128) and the portal's own listening ports on this machine (`ADDR:PORT`).

A check is made on the addresses a name resolves to, every one of them, and the caller connects
to the address that was checked (`connect_address`), so a name cannot resolve to one address for
the check and to another for the connection.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.module_loading import import_string

from core.cache import function_cache_register
from core.errors import ApplicationError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SETTING = "SOURCE_ALLOWED_NETWORKS"
METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.0.23", "100.100.100.200", "192.0.0.192",
    "fd00:ec2::254", "fd00:ec2::23"))
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
HOST_NAME = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?")


class OutboundRefused(ApplicationError):
    """An address the outbound policy refuses: a 400 at creation, the sync's reason after."""

    code = "address_refused"


class OutboundUnresolved(ApplicationError):
    """A host name that does not resolve (now): nothing was connected to."""

    code = "host_unresolved"
    status = 502


@dataclass(frozen=True)
class Allowed:
    """One entry of SOURCE_ALLOWED_NETWORKS: a network or a host name (`*.` for its subdomains),
    on one port or any (None)."""

    network: Network | None
    host: str
    port: int | None
    exact: bool  # names one address (a literal, /32 or /128)

    def covers(self, *, host: str, address: Address, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address in self.network
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host


def allowed_entry(text: str) -> Allowed:
    """One entry of the setting, or ValueError naming it."""
    entry, port = text.strip().lower(), None
    if entry.startswith("["):
        inside, _, rest = entry[1:].partition("]")
        entry, port = inside, (rest.removeprefix(":") or None)
    elif entry.count(":") == 1:
        entry, port = entry.split(":")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{SETTING}: {text!r} has no valid port")
    number = int(port) if port else None
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        if not HOST_NAME.fullmatch(entry):
            raise ValueError(f"{SETTING}: {text!r} is neither a network nor a host name") from None
        return Allowed(None, entry.rstrip("."), number, exact=False)
    return Allowed(network, "", number, exact=network.num_addresses == 1)


@function_cache_register
@lru_cache(maxsize=8)
def _entries(raw: tuple[str, ...]) -> tuple[Allowed, ...]:
    return tuple(allowed_entry(item) for item in raw)


def allowed_entries() -> tuple[Allowed, ...]:
    return _entries(tuple(settings.SOURCE_ALLOWED_NETWORKS))


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, 6to4, Teredo, NAT64), if any."""
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in NAT64) or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_rule(address: Address) -> str:
    """The rule that refuses the address by default, or "" for a public one. An IPv6 address that
    carries an IPv4 one is judged by that one first (`::ffff:127.0.0.1` is loopback)."""
    inner = embedded_ipv4(address)
    if inner is not None and address_rule(inner):
        return address_rule(inner)
    rules = (("unspecified", address.is_unspecified), ("loopback", address.is_loopback),
             ("link-local", address.is_link_local), ("multicast", address.is_multicast),
             ("carrier-grade NAT", address in CGNAT), ("broadcast", str(address) == "255.255.255.255"),
             ("reserved", address.is_reserved), ("private", address.is_private),
             ("reserved", not address.is_global))
    return next((name for name, hit in rules if hit), "")


def _own_address(address: Address) -> bool:
    """Whether the address is this machine's: loopback, unspecified, or one an interface holds
    (binding a socket to it succeeds; nothing is sent)."""
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def address_check(*, host: str, address: Address, port: int) -> None:
    """OutboundRefused unless the policy lets a request for `host` connect to `address`:`port`."""
    entries = [entry for entry in allowed_entries() if entry.covers(host=host, address=address, port=port)]
    named = any(entry.exact for entry in entries)
    shown = f"{host} ({address})" if host != str(address) else str(address)
    inner = embedded_ipv4(address)
    if (address in METADATA or inner in METADATA) and not named:
        raise OutboundRefused(f"{shown} is a cloud metadata address: sources may not reach it unless "
                              f"{SETTING} names it exactly.", {"rule": "cloud metadata", "setting": SETTING})
    if port in settings.OUTBOUND_OWN_PORTS and _own_address(inner or address) and not any(
            entry.exact and entry.port == port for entry in entries):
        raise OutboundRefused(f"{shown} port {port} is the portal's own: sources may not reach it unless "
                              f"{SETTING} names it exactly (ADDRESS:PORT).",
                              {"rule": "the portal's own address", "setting": SETTING})
    rule = address_rule(address)
    if rule and not entries:
        raise OutboundRefused(f"{shown} is refused by the {rule} rule: sources may not reach it unless "
                              f"{SETTING} allows it.", {"rule": rule, "setting": SETTING})


def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for `host` (numeric spellings included: `0x7f.1`,
    `2852039166`), as getaddrinfo answers a connection."""
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def host_addresses(*, host: str, port: int) -> list[Address]:
    """Every address `host` resolves to (the resolver is OUTBOUND_RESOLVER: tests swap it for one
    that sends nothing), or OutboundUnresolved."""
    resolve = import_string(settings.OUTBOUND_RESOLVER)
    try:
        found = resolve(host, port)
    except (OSError, UnicodeError):
        found = []
    addresses = list(dict.fromkeys(ipaddress.ip_address(a.split("%")[0]) for a in found))
    if not addresses:
        raise OutboundUnresolved(f"{host} cannot be resolved.", {"host": host})
    return addresses


def connect_address(*, host: str, port: int) -> str:
    """The address to connect to for `host`:`port`: every address it resolves to is checked (one
    refused refuses the host), and the first is the one to connect to."""
    host = host.strip("[]").lower().rstrip(".")
    addresses = host_addresses(host=host, port=port)
    for address in addresses:
        address_check(host=host, address=address, port=port)
    return str(addresses[0])


def url_host_port(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL; ValueError for one without a host."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"{url[:200]!r} has no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def url_check(url: str, *, strict: bool = False) -> None:
    """Refuse what can be seen before connecting: a literal, or a name that resolves to a refused
    address. A name that does not resolve now is let through (creation: the sync checks again),
    or OutboundUnresolved when `strict`."""
    host, port = url_host_port(url)
    try:
        connect_address(host=host, port=port)
    except OutboundUnresolved:
        if strict:
            raise
