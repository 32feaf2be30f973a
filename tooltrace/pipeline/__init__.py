"""The pipeline of one call: the stages, the two drivers (sync and async), the outcome rules,
the record builder and the book of active calls. The stages are handed a frozen
``Environment``, never the registry (``tooltrace.registry`` builds it). The stages and the
drivers load with the first call."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._environment import Book as Book
from ._environment import Emitter as Emitter
from ._environment import Environment as Environment
from ._eventhub import EventHub as EventHub
from ._sanitise import AttributeMemo as AttributeMemo

if TYPE_CHECKING:
    from ._drivers import arun as arun
    from ._drivers import run as run
    from ._stages import RawCall as RawCall

__getattr__, __dir__ = lazy_exports(
    __name__, {"run": "._drivers", "arun": "._drivers", "RawCall": "._stages"}, globals())

__all__ = ["AttributeMemo", "Book", "Emitter", "Environment", "EventHub", "RawCall", "arun",
           "run"]
