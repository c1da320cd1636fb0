from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


def _llm_servers_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """`manage.py check` (and migrate, which `./portal run` starts with) refuses a malformed `LLM_SERVERS`."""
    from chat.llm.clients import llm_servers
    from chat.llm.servers import ServersError

    try:
        llm_servers()
    except ServersError as error:
        return [
            checks.Error(
                str(error),
                hint="Fix LLM_SERVERS or the YAML file it names (docs/llm-servers.md).",
                id="hdrag.E010",
            )
        ]
    return []


class ChatConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        from chat.metrics import LLMCollector
        from core.metrics import REGISTRY

        checks.register(_llm_servers_check)
        REGISTRY.register(LLMCollector())
