"""Typed readers for environment variables that fail loudly on a bad value.

A setting with a typo ("ture", "10k") must stop the process at start-up with a message naming the
variable, never fall back to a default silently. Secrets can also come from `<NAME>_FILE`
(Docker/Kubernetes secrets), which wins over `<NAME>` when both are set.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str = "") -> str:
    """`$NAME`, or the content of the file named by `$NAME_FILE` (trailing newline stripped)."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as error:
            raise ImproperlyConfigured(
                f"{name}_FILE={file_name}: cannot read: {error.strerror or error}"
            ) from None
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean (use one of: 1/0, true/false, yes/no, on/off)"
    )


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be >= {minimum}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    """Comma-separated list; blank items are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def envnetworks(name: str) -> list[str]:
    """Comma-separated outbound allow-list entries (core.outbound.allowed_entry), each checked."""
    from core.outbound import allowed_entry

    entries = envlist(name, [])
    for entry in entries:
        try:
            allowed_entry(entry)
        except ValueError as error:
            raise ImproperlyConfigured(str(error)) from None
    return entries
