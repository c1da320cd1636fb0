"""Accounts: users, groups, API tokens and the credential throttle."""
