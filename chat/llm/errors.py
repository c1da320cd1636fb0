"""An LLM failure as the portal tells it: one `ApplicationError` per kind of `engine.llm.errors.LLMError`
(the engine imports no Django, so the family lives here), each carrying the code the chat stores and
sends and the HTTP status the APIs answer. Every surface (the chat turn and its websocket, the
conversations API, the OpenAI-compatible endpoint) reads them from `llm_failure`, and nowhere else."""

from __future__ import annotations

from core.errors import ApplicationError
from engine.llm.errors import (
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMProtocolError,
    LLMTimeoutError,
    LLMUnauthorizedError,
    PromptTooLongError,
)


class LLMFailure(ApplicationError):
    """The language model failed; the message is the engine's, fit to show a user.

    `openai_code` is what the OpenAI-compatible endpoint answers instead of `code`: it has always
    said `llm_unavailable` for a server that failed, whatever the way, and its clients read that."""

    code = "llm_error"
    status = 503
    openai_code = "llm_unavailable"

    def openai(self) -> LLMFailure:
        """This failure as the OpenAI-compatible endpoint answers it (its code, the same status)."""
        failure = type(self)(f"The language model failed: {self.message}")
        failure.code = self.openai_code
        return failure


class LLMUnreachable(LLMFailure):
    code = "llm_unreachable"


class LLMTimedOut(LLMFailure):
    code = "llm_timeout"


class LLMHTTPFailure(LLMFailure):
    code = "llm_http_error"


class LLMUnauthorized(LLMFailure):
    """The server refused the portal's credentials: a bad gateway, the operator's to mend."""

    code = "llm_unauthorized"
    status = 502
    openai_code = "llm_unauthorized"


class LLMProtocolFailure(LLMFailure):
    code = "llm_protocol_error"


class PromptTooLong(LLMFailure):
    """The new turn and the system prompt alone leave no room in the context: the request's fault."""

    code = "prompt_too_long"
    status = 400
    openai_code = "invalid"

    def openai(self) -> LLMFailure:
        """A bad request to the OpenAI-compatible endpoint, naming this code in its details."""
        failure = PromptTooLong(self.message, {"code": self.code})
        failure.code = self.openai_code
        return failure


FAILURES: dict[type[LLMError], type[LLMFailure]] = {
    LLMConnectionError: LLMUnreachable,
    LLMTimeoutError: LLMTimedOut,
    LLMHTTPError: LLMHTTPFailure,
    LLMUnauthorizedError: LLMUnauthorized,
    LLMProtocolError: LLMProtocolFailure,
    PromptTooLongError: PromptTooLong,
}


def llm_failure(error: LLMError) -> LLMFailure:
    """The failure of `error`'s own kind; an `LLMError` of no kind listed is an `LLMFailure`."""
    kind = FAILURES.get(type(error), LLMFailure)
    return kind(str(error))
