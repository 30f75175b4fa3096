"""Reading NIXL telemetry rings: the shared-memory files of the ``BUFFER`` exporter
(``$NIXL_TELEMETRY_DIR/<agent name>``), written by this library or by NIXL itself, of either
layout: version 4 (NIXL's) or version 5 (NIXL's open pull request #2018)."""

from __future__ import annotations

import os
from typing import NamedTuple

from nixl_telemetry import _native
from nixl_telemetry.errors import InvalidArgumentError

__all__ = ["EVENT_NAMES", "Event", "RingReader"]

#: NIXL's event names, indexed by numeric event type (``EVENT_NAMES[0] == "agent_tx_bytes"``,
#: ... ``EVENT_NAMES[20] == "agent_telemetry_events_dropped"``, and
#: ``EVENT_NAMES[21] == "agent_err_xfer_stalled"``, of NIXL's open pull request #2047).
EVENT_NAMES: tuple[str, ...] = _native.EVENT_NAMES


class Event(NamedTuple):
    """One telemetry event: a single per-operation reading.

    Attributes:
        name: NIXL's event name (``agent_tx_bytes``, ``agent_err_backend``, ...), or
            ``unknown_event_<type>`` for a type this version does not know.
        type: the numeric event type (0..21 for the known ones).
        value: the reading: bytes, a count or microseconds, depending on the type.
    """

    name: str
    type: int
    value: int


def _event(event_type: int, value: int) -> Event:
    if event_type < len(EVENT_NAMES):
        return Event(EVENT_NAMES[event_type], event_type, value)
    return Event(_native.event_name(event_type), event_type, value)


class RingReader:
    """The consumer of a ring file.

    Opening checks the whole file before trusting any of it, and refuses a file that is missing
    (:class:`~nixl_telemetry.NotFoundError`), shorter than its header says
    (:class:`~nixl_telemetry.RingTruncatedError`), of a layout version other than 4 and 5
    (:class:`~nixl_telemetry.RingVersionError`, the file is left untouched) or otherwise not a
    ring (:class:`~nixl_telemetry.RingFormatError`).

    Reading consumes events: :meth:`pop` and iteration advance ``read_pos`` in the file, as
    NIXL's own readers do, so use one reader per ring at a time. ``len(reader)`` is the number
    of pending events, and iterating drains them::

        with RingReader("/tmp/telemetry/agent-0") as reader:
            for event in reader:
                print(event.name, event.value)

    A reader may follow a ring that is being written: iterating again later yields the events
    written since. It is not meant to be shared between threads without a lock.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Opens the ring file at ``path`` (read-write, since reading advances ``read_pos``)."""
        try:
            self._path = os.fsdecode(path)
        except TypeError:
            raise InvalidArgumentError(
                f"a ring path must be a str or os.PathLike, got {type(path).__name__}"
            ) from None
        self._ring = _native.Ring(self._path)

    @property
    def path(self) -> str:
        """The ring file's path, as given."""
        return self._path

    @property
    def capacity(self) -> int:
        """The number of records in the ring (a power of two; one fewer is usable)."""
        return self._ring.capacity()

    @property
    def version(self) -> int:
        """The ring's layout version: 4 (NIXL's) or 5 (the 512-byte header of NIXL's open pull
        request #2018)."""
        return self._ring.version()

    @property
    def lost_events(self) -> int | None:
        """How many events the ring's writer could not put into this ring since it created it
        (its reader was behind, or a flush was larger than the ring); ``None`` when the writer
        keeps no count for it (a ring written by NIXL). Read from ``.<name>.lost`` beside the
        ring, which NIXL's readers never open. Raises :class:`~nixl_telemetry.errors.NotAllowedError` when the file
        there cannot be believed (another user's, a link, a file others may write), rather than
        give its number or ``None``."""
        return self._ring.lost_events()

    def __len__(self) -> int:
        """The number of pending (unread) events."""
        return self._ring.len()

    def pop(self) -> Event | None:
        """Takes the oldest pending event, or returns None when there is none."""
        record = self._ring.pop()
        return None if record is None else _event(*record)

    def peek(self, limit: int | None = None) -> list[Event]:
        """The pending events (at most ``limit``), oldest first, without consuming them: a
        later :meth:`pop` or iteration still returns them."""
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidArgumentError(f"limit must be None or an int >= 0, got {limit!r}")
        return [_event(t, v) for t, v in self._ring.peek(limit)]

    def __iter__(self) -> RingReader:
        """Iterating pops every pending event, oldest first, and stops when none is left."""
        return self

    def __next__(self) -> Event:
        event = self.pop()
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        """Unmaps the file. Idempotent; any later read raises
        :class:`~nixl_telemetry.InvalidArgumentError`."""
        self._ring.close()

    def __enter__(self) -> RingReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RingReader({self._path!r})"
