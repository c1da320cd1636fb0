"""core.outbound without a server: every spelling and IPv6 form of a refused address, the
allow-list's entries and their exact-name rules. Names resolve through tests/plugins/outbound.py."""

from __future__ import annotations

import pytest

from core.outbound import OutboundRefused, OutboundUnresolved, allowed_entry, connect_address

REFUSED = {
    "127.0.0.1": "loopback", "127.1": "loopback", "0x7f.1": "loopback", "017700000001": "loopback",
    "2130706433": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback", "::7f00:1": "loopback",
    "2002:7f00:1::": "loopback", "64:ff9b::7f00:1": "loopback", "10.0.0.1": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private", "fd12::1": "private", "169.254.1.1": "link-local", "fe80::1": "link-local",
    "100.64.0.1": "carrier-grade NAT", "224.0.0.1": "multicast", "ff02::1": "multicast",
    "0.0.0.0": "unspecified", "::": "unspecified", "255.255.255.255": "broadcast", "240.0.0.1": "reserved",
    "169.254.169.254": "cloud metadata", "2852039166": "cloud metadata", "fd00:ec2::254": "cloud metadata",
    "100.100.100.200": "cloud metadata", "::ffff:169.254.169.254": "cloud metadata",
}


@pytest.mark.parametrize(("host", "rule"), REFUSED.items())
def test_refused_by_default(host, rule):
    with pytest.raises(OutboundRefused, match=rule):
        connect_address(host=host, port=80)


def test_public_addresses_and_names_pass(names):
    names["docs.example.org"] = ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    assert connect_address(host="8.8.8.8", port=443) == "8.8.8.8"
    assert connect_address(host="docs.example.org", port=443) == "93.184.215.14"
    names["mixed.example.org"] = ["93.184.215.14", "10.0.0.5"]  # one refused address refuses the name
    with pytest.raises(OutboundRefused, match="private"):
        connect_address(host="mixed.example.org", port=443)
    with pytest.raises(OutboundUnresolved):
        connect_address(host="nowhere.example.org", port=443)


def test_the_setting_allows_networks_names_and_ports(settings, names):
    names["wiki.corp"] = ["10.1.2.3"]
    names["git.team.corp"] = ["10.9.9.9"]
    settings.SOURCE_ALLOWED_NETWORKS = ["192.168.0.0/16", "wiki.corp", "*.team.corp", "10.5.5.5:8443",
                                        "169.254.0.0/16", "[fd00::7]:443"]
    assert connect_address(host="192.168.1.1", port=80) == "192.168.1.1"
    assert connect_address(host="wiki.corp", port=443) == "10.1.2.3"
    assert connect_address(host="git.team.corp", port=443) == "10.9.9.9"
    assert connect_address(host="10.5.5.5", port=8443) == "10.5.5.5"
    assert connect_address(host="fd00::7", port=443) == "fd00::7"
    for host, port, rule in [("10.5.5.5", 80, "private"), ("10.1.2.3", 443, "private"),
                             ("169.254.169.254", 80, "cloud metadata"), ("169.254.1.1", 80, None)]:
        if rule is None:
            assert connect_address(host=host, port=port) == host
            continue
        with pytest.raises(OutboundRefused, match=rule):
            connect_address(host=host, port=port)
    settings.SOURCE_ALLOWED_NETWORKS = ["169.254.169.254/32"]  # named exactly: an operator's own choice
    assert connect_address(host="169.254.169.254", port=80) == "169.254.169.254"


def test_the_portals_own_ports(settings):
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.OUTBOUND_OWN_PORTS = [8000, 8081]
    assert connect_address(host="127.0.0.1", port=9000) == "127.0.0.1"
    for port in (8000, 8081):
        with pytest.raises(OutboundRefused, match="portal's own"):
            connect_address(host="127.0.0.1", port=port)
    settings.SOURCE_ALLOWED_NETWORKS = ["127.0.0.0/8", "127.0.0.1:8081"]
    assert connect_address(host="127.0.0.1", port=8081) == "127.0.0.1"


@pytest.mark.parametrize("entry", ["foo bar", "10.0.0.0/33", "1.2.3.4:0", "1.2.3.4:99999", "a..b", "",
                                   "[::1]x"])
def test_bad_entries_are_named(entry):
    with pytest.raises(ValueError, match="SOURCE_ALLOWED_NETWORKS"):
        allowed_entry(entry)
