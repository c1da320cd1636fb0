"""Which LLM models a user may use, and his default one.

The models are those the server pool serves (`chat.llm.clients.server_pool`, in `LLM_SERVERS`
order). The admin's `LLMModel` rows narrow them: a model with groups is for the members of those
groups (and superusers) only; a model without groups, or without a row, is open to every user, so
with no row at all (`./portal run`) everyone may use every model. The default is the model the
admin marked `is_default` where the user may use it, else the first he may use (the pool's first
model when no row says otherwise).

The chat page's select, the conversations API and the OpenAI-compatible endpoint offer and accept
only `models_for(user)`; a model the user may not use reads as one that does not exist for him
(the same error, the same list), as an unreadable corpus does.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from chat.llm.clients import server_pool
from chat.models import LLMModel
from core.errors import ApplicationError


class ModelUnknown(ApplicationError):
    """A model no server serves, or one the user may not use: 400 with the models he may use."""

    code = "llm_model_unknown"


def models_for(user: AbstractBaseUser) -> list[str]:
    """The served models `user` may use, his default first, then in the servers' order."""
    served = server_pool().models
    default = ""
    restricted: dict[str, set[int]] = {}
    for row in LLMModel.objects.prefetch_related("groups"):
        default = row.name if row.is_default else default
        groups = {group.pk for group in row.groups.all()}
        if groups:
            restricted[row.name] = groups
    if restricted and not getattr(user, "is_superuser", False):
        mine = set(user.groups.values_list("pk", flat=True)) if user.is_authenticated else set()
        served = [model for model in served if model not in restricted or restricted[model] & mine]
    if default in served:
        served = [default, *(model for model in served if model != default)]
    return served


def model_check(user: AbstractBaseUser, model: str) -> str:
    """`model` (stripped) when `user` may use it, "" for blank (his default); ModelUnknown otherwise."""
    model = model.strip()
    if model:
        _offered(user, model)
    return model


def model_for_turn(user: AbstractBaseUser, model: str) -> str:
    """The model that answers a turn of `user` asking for `model` (blank: his default); ModelUnknown
    when he may not use it, or may use no model at all."""
    return _offered(user, model.strip())


def _offered(user: AbstractBaseUser, model: str) -> str:
    offered = models_for(user)
    if model and model in offered:
        return model
    if not model and offered:
        return offered[0]
    yours = ", ".join(offered) or "none (ask an administrator)"
    if model:
        message = (f"The LLM model {model!r} is not one you may use (no server serves it, or it is kept for "
                   f"other groups); yours: {yours}.")
    else:
        message = f"There is no LLM model you may use; yours: {yours}."
    raise ModelUnknown(message, {"model": model, "models": offered})
