"""The pipeline of one call: the stages, the two drivers (sync and async), the outcome rules,
the record builder and the book of active calls. The stages are handed a frozen environment,
never the registry."""

# Names the other core packages use.
from ._authorize import AllowDetails as AllowDetails
from ._book import StatusTable as StatusTable
from ._drivers import arun as arun
from ._drivers import run as run
from ._eventhub import EventHub as EventHub
from ._eventhub import Subscription as Subscription
from ._record import redact_detail as redact_detail
from ._sanitise import AttributeMemo as AttributeMemo
from ._stages import RawCall as RawCall
