"""The reliability and security gauntlet: each test has a fast CI size and a long size.

``TOOLTRACE_LONG=1`` selects the long sizes; every test records the figures it measured, and
the session ends with a table of them (see ``conftest.py``).
"""
