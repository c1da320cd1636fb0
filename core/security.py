"""Response headers that Django 5.2 does not set itself: the Content-Security-Policy.

The pages load scripts and styles from /static/ only (no inline code, no event-handler attributes,
no style attributes: `tests/core/test_security.py` checks the rendered pages), so the policy can
forbid everything else, which turns an escaping mistake into a blocked script instead of an XSS.
`connect-src 'self'` covers the page's own websockets (CSP Level 3 matches ws:/wss: of the page's
host and port). Set `CONTENT_SECURITY_POLICY` to an empty string to send none.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

DEFAULT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
