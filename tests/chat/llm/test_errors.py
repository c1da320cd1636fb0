"""The one family of LLM failures (chat.llm.errors): every kind of engine LLM error has its failure,
and each failure's code and status are the ones the chat, the conversations API and the
OpenAI-compatible endpoint have always answered (their tests pin them through the real endpoints)."""

from __future__ import annotations

import inspect

import pytest

from chat.llm.errors import FAILURES, LLMFailure, llm_failure
from core.errors import ApplicationError
from engine.llm import errors as engine_errors


def test_every_engine_llm_error_has_its_failure():
    kinds = {kind for _, kind in inspect.getmembers(engine_errors, inspect.isclass)
             if issubclass(kind, engine_errors.LLMError) and kind is not engine_errors.LLMError}
    assert kinds == set(FAILURES)


@pytest.mark.parametrize(("error", "code", "status", "openai_code"), [
    (engine_errors.LLMConnectionError("the LLM server at http://127.0.0.1:9 refused"), "llm_unreachable", 503,
     "llm_unavailable"),
    (engine_errors.LLMTimeoutError("no token for 60 s"), "llm_timeout", 503, "llm_unavailable"),
    (engine_errors.LLMHTTPError("HTTP 500", 500), "llm_http_error", 503, "llm_unavailable"),
    (engine_errors.LLMUnauthorizedError("refused the portal's credentials", 401), "llm_unauthorized", 502,
     "llm_unauthorized"),
    (engine_errors.LLMProtocolError("not SSE"), "llm_protocol_error", 503, "llm_unavailable"),
    (engine_errors.PromptTooLongError("no room"), "prompt_too_long", 400, "invalid"),
    (engine_errors.LLMError("something else"), "llm_error", 503, "llm_unavailable"),
])
def test_each_failure_carries_its_code_and_status_for_every_surface(error, code, status, openai_code):
    failure = llm_failure(error)
    assert isinstance(failure, LLMFailure) and isinstance(failure, ApplicationError)
    assert (failure.code, failure.status, failure.message) == (code, status, str(error))
    openai = failure.openai()
    assert (openai.code, openai.status) == (openai_code, status)
    if isinstance(error, engine_errors.PromptTooLongError):  # a bad request, its reason in the details
        assert (openai.message, openai.details) == (str(error), {"code": "prompt_too_long"})
    else:
        assert (openai.message, openai.details) == (f"The language model failed: {error}", {})
