"""The GPU plugins' shared test suite: every test runs once per driver stand-in (see vendors.py)."""
