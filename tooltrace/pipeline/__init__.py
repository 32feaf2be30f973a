"""The pipeline of one call: the stages, the two drivers (sync and async), the outcome rules,
the record builder and the book of active calls. The stages are handed a frozen
``Environment``, never the registry (``tooltrace.registry`` builds it)."""

from ._drivers import arun as arun
from ._drivers import run as run
from ._environment import Book as Book
from ._environment import Emitter as Emitter
from ._environment import Environment as Environment
from ._eventhub import EventHub as EventHub
from ._sanitise import AttributeMemo as AttributeMemo
from ._stages import RawCall as RawCall

__all__ = ["AttributeMemo", "Book", "Emitter", "Environment", "EventHub", "RawCall", "arun",
           "run"]
