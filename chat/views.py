from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse


@login_required
def chat_index(request: HttpRequest) -> HttpResponse:
    return HttpResponse("Chat is being set up.")
