"""Sign-in through the team's OpenID Connect provider (docs/single-sign-on.md).

django-allauth's `openid_connect` provider does the protocol: discovery, the authorization code
flow with PKCE (S256), the ID token's signature, issuer and audience, and the identity (issuer
app + `sub`, a SocialAccount). This package holds the portal's policy on top of it, through
allauth's documented adapters and signals: who gets in (`adapter`), which groups and staff status
the claims give (`groups`), and a logout that ends the provider's session too (`views`).
"""

PROVIDER_ID = "sso"  # the SocialApp's provider_id: the redirect URI is /accounts/oidc/sso/login/callback/
