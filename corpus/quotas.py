"""Per-account storage: what a user's uploads take (the sizes of the datasets they uploaded, in any
corpus) against `USER_STORAGE_QUOTA_BYTES`. Staff have no quota, nor do uploads without a user
(management commands); 0 turns the quota off for everyone."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Sum

from accounts.quotas import day_bounds, quota_check, quota_limits
from corpus.models import Dataset
from corpus.uploads import byte_size


@dataclass(frozen=True)
class StorageUsage:
    used: int
    quota: int | None  # None: no quota

    @property
    def left(self) -> int | None:
        return None if self.quota is None else max(self.quota - self.used, 0)

    def allows(self, size: int) -> bool:
        return self.quota is None or self.used + size <= self.quota

    @property
    def summary(self) -> str:
        """What the user's pages say; "" without a quota."""
        if self.quota is None:
            return ""
        return f"You use {byte_size(self.used)} of your storage quota of {byte_size(self.quota)}."

    def refusal(self, name: str) -> str:
        return (f"{name}: this would take you past your storage quota: you use {byte_size(self.used)} of "
                f"{byte_size(self.quota or 0)}. Delete datasets you no longer need, or ask an administrator "
                f"for more room.")


def storage_quota(*, user: AbstractBaseUser | None) -> int | None:
    if user is None or user.is_staff or user.is_superuser or not settings.USER_STORAGE_QUOTA_BYTES:
        return None
    return settings.USER_STORAGE_QUOTA_BYTES


def storage_usage(*, user: AbstractBaseUser | None, lock: bool = False) -> StorageUsage:
    """`lock` (inside a transaction): hold the user's row until it ends, so that uploads of one user
    that run at once add their sizes one after the other instead of each passing the same check."""
    quota = storage_quota(user=user)
    if user is None:
        return StorageUsage(used=0, quota=quota)
    if lock and quota is not None:
        get_user_model().objects.select_for_update().get(pk=user.pk)
    used = Dataset.objects.filter(uploaded_by=user).aggregate(total=Sum("size"))["total"] or 0
    return StorageUsage(used=used, quota=quota)


def upload_quota_check(*, user: AbstractBaseUser | None, name: str, size: int) -> None:
    """Raise `accounts.quotas.QuotaExceeded` (429) when storing `size` more bytes today would pass
    the person's daily upload quota (`QUOTA_UPLOAD_BYTES_PER_DAY` or their `Quota`)."""
    limits = None if user is None else quota_limits(user=user)
    if limits is None or limits.upload_bytes_per_day is None:
        return
    start, _ = day_bounds()
    today = Dataset.objects.filter(uploaded_by=user, uploaded_at__gte=start).aggregate(total=Sum("size"))[
        "total"
    ]
    quota_check(user=user, kind="upload_bytes_per_day", used=today or 0, adding=size, subject=f"{name}: ",
                limits=limits)
