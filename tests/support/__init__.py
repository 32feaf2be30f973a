"""Helpers shared by the test suite: real servers, workloads, fixtures and component checks.

``tests/`` is on ``sys.path`` under pytest (its rootdir-relative conftest puts it there), so
tests import these as ``from support.otlp import OtlpHttpReceiver``.
"""
