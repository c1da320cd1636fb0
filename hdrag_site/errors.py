"""The one application error: a message for people and details for programs.

Services raise it (or a subclass) for anything the caller did wrong or cannot do now; views show
the message, the API (later) maps it to one JSON error shape.
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
