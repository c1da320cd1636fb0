"""What a sign-in's claims say, read the same way whichever provider sent them (pure functions)."""

from __future__ import annotations

from typing import Any


def claims_merged(extra_data: dict[str, Any]) -> dict[str, Any]:
    """The claims of a sign-in: the ID token's, overridden by the userinfo endpoint's where both
    name one (allauth keeps both in `SocialAccount.extra_data`; older rows hold the claims flat)."""
    if "id_token" not in extra_data and "userinfo" not in extra_data:
        return dict(extra_data)
    return {**(extra_data.get("id_token") or {}), **(extra_data.get("userinfo") or {})}


def claim_groups(claims: dict[str, Any], claim: str) -> set[str]:
    """The group names in `claim`: a list of strings, or one string (some providers send a lone
    group so). Absent, null or empty: no groups, so every provider-managed membership is removed.
    A dotted name reads a nested claim (`realm_access.roles` in Keycloak)."""
    value: Any = claims
    for part in claim.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return set()
    return {name.strip()[:150] for name in value if isinstance(name, str) and name.strip()}


def claim_email_verified(claims: dict[str, Any]) -> bool | None:
    """`email_verified` as a boolean; None when the provider sent none (Entra ID sends none).
    Some providers send the string "true"."""
    value = claims.get("email_verified")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def email_domain(email: str) -> str:
    return email.rpartition("@")[2].strip().lower() if "@" in email else ""


def sign_in_refusal(claims: dict[str, Any], *, allowed_domains: list[str], blocked_groups: list[str],
                    groups_claim: str) -> str | None:
    """Why these claims may not sign in (a sentence for the person), or None when they may."""
    if allowed_domains:
        domain = email_domain(str(claims.get("email") or ""))
        if domain not in allowed_domains:
            return (f"Your email address's domain ({domain or 'none'}) is not one this portal accepts."
                    if domain else "Your identity provider sent no email address, and this portal needs one "
                                   "of an accepted domain.")
    blocked = claim_groups(claims, groups_claim) & set(blocked_groups)
    if blocked:
        return f"Members of {', '.join(sorted(blocked))} may not sign in to this portal."
    return None
