"""The failures of talking to the chat model: every one an `LLMError` whose message is fit to show
a user (it names the server's URL without credentials)."""

from __future__ import annotations


class LLMError(RuntimeError):
    """Generation failed; the message is fit to show a user (names the server URL)."""


class LLMConnectionError(LLMError):
    """The server could not be reached (refused, DNS, reset before an answer)."""


class LLMTimeoutError(LLMError):
    """The server did not answer, or stopped sending tokens, within the timeout."""


class LLMHTTPError(LLMError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class LLMUnauthorizedError(LLMHTTPError):
    """The server refused the portal's credentials (HTTP 401 or 403): a wrong or missing API key."""


class LLMProtocolError(LLMError):
    """The server's stream was not the OpenAI chat-completion SSE format."""


class PromptTooLongError(LLMError):
    """The new user turn and system prompt alone leave no room in the context."""
