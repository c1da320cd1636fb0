"""The ground: what every app uses and no app owns. Imports no app (tests/test_layout.py)."""
