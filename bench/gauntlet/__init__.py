"""The gauntlet's long versions: ``python -m bench.gauntlet`` (see ``__main__.py``)."""
