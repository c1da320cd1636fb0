"""Schemathesis against the live schema: every operation fuzzed (valid and invalid input, with a
real token) on the live ASGI app; no 500s, and every response matches the schema (status, content
type, body, headers). Bounded: a few examples per operation, deletions last."""

from __future__ import annotations

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accounts.services.tokens import api_token_create
from tests.plugins.portal import upload

EXAMPLES = 6


def test_every_operation_conforms_to_the_live_schema(
    settings, chat_settings, live_api, owner, corpus, dataset
):
    # Schemathesis sends a wrong token to every operation, from one address: the credential throttle
    # (tested from the outside in tests/accounts/test_tokens.py) would answer its later tries with 429.
    settings.AXES_FAILURE_LIMIT = settings.LOGIN_ADDRESS_FAILURE_LIMIT = 10_000
    secret = api_token_create(user=owner, name="schemathesis")[1]
    headers = {"Authorization": f"Bearer {secret}"}
    upload(corpus, owner, ["A second dataset about the tides and the moon."], name="tides.jsonl")
    schema = schemathesis.openapi.from_url(f"{live_api.url}/api/schema/", headers=headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda operation: operation.method.upper() == "DELETE")
    assert len(operations) >= 30
    session = requests.Session()
    failures = []
    for operation in operations:
        @given(case=operation.as_strategy())
        @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
        def check(case):  # noqa: ANN001
            # Schema-valid input may still be refused by the services (a file that is not a dataset,
            # a chat whose last turn is not the user's): that is a documented 400, not a failure.
            case.call_and_validate(base_url=live_api.url, session=session, headers=headers,
                                   excluded_checks=[positive_data_acceptance], timeout=120)

        try:
            check()
        except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - collect every operation's failure
            failures.append(f"{operation.method.upper()} {operation.path}: {error}")
    assert not failures, f"{len(failures)} operations failed:\n\n" + "\n\n".join(failures)


@pytest.fixture(autouse=True)
def _quiet_requests_log(caplog) -> None:
    caplog.set_level("ERROR")
