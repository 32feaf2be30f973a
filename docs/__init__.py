"""Makes docs/conftest.py (the pages' examples as tests) import as docs.conftest, apart from
the tests' own conftest modules."""
