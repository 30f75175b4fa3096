"""NIXL telemetry and Dynamo forward-pass-metrics traces, from Python.

The package binds the ``nixl-telemetry`` library (a Rust re-implementation of NIXL's telemetry
system); it needs nothing else at run time.

- :class:`RingReader` reads the shared-memory rings of the ``BUFFER`` exporter, whether this
  library or NIXL itself wrote them, as :class:`Event` values.
- :class:`Telemetry` is one agent's producer (``update``, ``add_xfer_stats``, ``update_error``),
  configured by ``NIXL_TELEMETRY_*`` like NIXL's.
- :func:`effective_config` shows every setting's effective value and origin (the environment,
  NIXL's configuration file, the default), as ``nixl-telemetry config`` does.
- :class:`FpmTrace` writes Dynamo's FPM traces, configured by ``DYN_FPM_*``; it never blocks
  and never fails the caller.

Every exception derives from :class:`NixlTelemetryError` (see :mod:`nixl_telemetry.errors`).
"""

from importlib.metadata import PackageNotFoundError, version

from nixl_telemetry.config import SettingValue, effective_config
from nixl_telemetry.errors import (
    InvalidArgumentError,
    NixlTelemetryError,
    NotAllowedError,
    NotFoundError,
    RingFormatError,
    RingTruncatedError,
    RingVersionError,
)
from nixl_telemetry.fpm import (
    ForwardPassMetrics,
    FpmPayload,
    FpmTrace,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
)
from nixl_telemetry.ring import EVENT_NAMES, Event, RingReader
from nixl_telemetry.telemetry import Recorded, Telemetry

try:
    __version__ = version("nixl-telemetry")
except PackageNotFoundError:  # imported from a source tree with a built extension
    __version__ = "0+unknown"

__all__ = [
    "EVENT_NAMES",
    "Event",
    "ForwardPassMetrics",
    "FpmPayload",
    "FpmTrace",
    "InvalidArgumentError",
    "NixlTelemetryError",
    "NotAllowedError",
    "NotFoundError",
    "QueuedRequestMetrics",
    "Recorded",
    "RingFormatError",
    "RingReader",
    "RingTruncatedError",
    "RingVersionError",
    "ScheduledRequestMetrics",
    "SettingValue",
    "Telemetry",
    "effective_config",
]
