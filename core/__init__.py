"""The ground: what every app uses and no app owns. Imports no app (tests/core/test_layout.py)."""
