"""The exceptions of :mod:`nixl_telemetry`.

Every exception the package raises derives from :class:`NixlTelemetryError`. ``str(e)`` is the
library's message, which names the file, variable or argument at fault, and ``e.status`` the
library's status code (``nixl_telemetry_status_t``: NIXL's ``nixl_status_t`` values, for example
-2 for an invalid parameter or -4 for something not found).

Tracing and telemetry that are merely *off* (not requested, misconfigured for the FPM trace, a
scrape port held by another process) never raise: the objects report it through ``enabled``
and ``disabled_reason`` instead.
"""

from __future__ import annotations

__all__ = [
    "NixlTelemetryError",
    "InvalidArgumentError",
    "NotFoundError",
    "NotAllowedError",
    "RingFormatError",
    "RingVersionError",
    "RingTruncatedError",
]

class NixlTelemetryError(Exception):
    """Base class of every exception raised by :mod:`nixl_telemetry`.

    Attributes:
        status: the library's status code (``nixl_telemetry_status_t``); when the exception is
            raised without one, the class's own (-8, ``NIXL_TELEMETRY_ERR_UNKNOWN``, here).
    """

    status: int
    _default_status = -8

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = self._default_status if status is None else status


class InvalidArgumentError(NixlTelemetryError, ValueError):
    """An argument is invalid (wrong type or value), or a ``NIXL_TELEMETRY_*`` setting is.

    Also a :class:`ValueError`. Default status -2 (``NIXL_TELEMETRY_ERR_INVALID_PARAM``).
    """

    _default_status = -2


class NotFoundError(NixlTelemetryError, FileNotFoundError):
    """A ring file, or an exporter plug-in, does not exist.

    Also a :class:`FileNotFoundError`. Default status -4 (``NIXL_TELEMETRY_ERR_NOT_FOUND``).
    """

    _default_status = -4


class NotAllowedError(NixlTelemetryError, PermissionError):
    """Permission denied, or a resource (a ring file) already owned by another writer.

    Also a :class:`PermissionError`. Default status -6 (``NIXL_TELEMETRY_ERR_NOT_ALLOWED``).
    """

    _default_status = -6


class RingFormatError(NixlTelemetryError):
    """A file is not a NIXL telemetry ring of the supported layout (version 4).

    The subclasses name the two common cases; this class itself covers the others (a capacity
    that is not a power of two, a mask that does not match it, something that is not a regular
    file). Default status -5 (``NIXL_TELEMETRY_ERR_MISMATCH``).
    """

    _default_status = -5


class RingVersionError(RingFormatError):
    """The file's header carries another layout version. The file is left untouched."""


class RingTruncatedError(RingFormatError):
    """The file is shorter than a ring header, or than the records its header announces."""
