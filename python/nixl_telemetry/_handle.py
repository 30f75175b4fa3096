"""What :class:`~nixl_telemetry.Telemetry` and :class:`~nixl_telemetry.FpmTrace` share: being
enabled or not, counters, an idempotent close, the context-manager protocol, and two process
events.

- At interpreter exit every handle still open is closed, so its last events or rows are flushed
  and written (``atexit``).
- In a child created by ``os.fork()`` every handle inherited from the parent is disabled and
  never touched again: the child has none of the parent's background threads, so flushing,
  closing or even destroying it there could wait for a thread that does not exist.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Protocol, TypeVar

_log = logging.getLogger("nixl_telemetry")

#: The ``disabled_reason`` of a handle inherited through ``fork``.
FORKED_REASON = "inherited from the parent process through fork(); open a new one in this process"


class NativeHandle(Protocol):
    """The native object behind a handle (``_native.Agent`` or ``_native.Fpm``)."""

    def stats(self) -> dict[str, int] | None: ...

    def close(self) -> dict[str, int] | None: ...

    def abandon(self) -> None: ...


_H = TypeVar("_H", bound="Handle")

_open: weakref.WeakSet[Handle] = weakref.WeakSet()
_open_lock = threading.Lock()


class Handle:
    """Base class of the package's handles; not instantiated directly."""

    _native: NativeHandle
    _stats_fields: tuple[str, ...]

    def __init__(
        self, native: NativeHandle, stats_fields: tuple[str, ...], disabled_reason: str | None
    ) -> None:
        self._native = native
        self._stats_fields = stats_fields
        self._disabled_reason = disabled_reason
        self._is_open = disabled_reason is None
        self._final_stats: dict[str, int] | None = None
        if self._is_open:
            with _open_lock:
                _open.add(self)

    @property
    def enabled(self) -> bool:
        """True while the handle is open and working; False when it was disabled from the
        start (see :attr:`disabled_reason`) or has been closed. Calls on a handle that is not
        enabled check their arguments and do nothing else."""
        return self._is_open

    @property
    def disabled_reason(self) -> str | None:
        """Why the handle is disabled (the library's message), None when it was enabled."""
        return self._disabled_reason

    def stats(self) -> dict[str, int]:
        """The counters, as a dict of int. Final after :meth:`close`; all zero for a handle
        that was never enabled."""
        live = self._native.stats()
        if live is not None:
            return live
        if self._final_stats is not None:
            return dict(self._final_stats)
        return dict.fromkeys(self._stats_fields, 0)

    def close(self) -> dict[str, int]:
        """Flushes everything recorded, releases the handle and returns the final counters.
        Idempotent; every later call records nothing."""
        with _open_lock:
            was_open, self._is_open = self._is_open, False
            _open.discard(self)
        if was_open:
            self._final_stats = self._native.close()
        return self.stats()

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _abandon(self) -> None:
        """Disables a handle inherited through ``fork`` without touching its native state."""
        self._native.abandon()
        self._is_open = False
        self._disabled_reason = FORKED_REASON


def _close_all() -> None:
    """Closes every open handle (at interpreter exit)."""
    with _open_lock:
        handles = list(_open)
    for handle in handles:
        try:
            handle.close()
        except Exception:  # noqa: BLE001 - exit must go on; report and close the others
            _log.exception("nixl_telemetry: closing %r at exit failed", handle)


def _abandon_all() -> None:
    """Disables every handle inherited by a forked child (runs in the child)."""
    global _open_lock
    # The parent's lock may have been held by another thread at the fork.
    _open_lock = threading.Lock()
    handles = list(_open)
    _open.clear()
    for handle in handles:
        handle._abandon()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_abandon_all)
