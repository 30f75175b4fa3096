"""Producing NIXL telemetry from Python: one agent's collector, as NIXL's core creates it."""

from __future__ import annotations

import enum

from nixl_telemetry import _native
from nixl_telemetry._handle import Handle
from nixl_telemetry.errors import InvalidArgumentError

__all__ = ["Recorded", "Telemetry"]


class Recorded(str, enum.Enum):
    """What a record call did with its event (or its transfer's batch of events)."""

    #: Staged for the next flush.
    ACCEPTED = "accepted"
    #: Skipped: the metric is deactivated by ``NIXL_TELEMETRY_ENABLED_METRICS`` (not a drop).
    DEACTIVATED = "deactivated"
    #: The staging queue was full: dropped, counted, and reported as the
    #: ``agent_telemetry_events_dropped`` event of the next flush.
    DROPPED = "dropped"
    #: Nothing recorded: the :class:`Telemetry` is disabled or closed.
    DISABLED = "disabled"


#: In the order of the native layer's codes.
_RECORDED = (Recorded.ACCEPTED, Recorded.DEACTIVATED, Recorded.DROPPED, Recorded.DISABLED)


class Telemetry(Handle):
    """The telemetry of one agent, configured by the ``NIXL_TELEMETRY_*`` environment (read
    when it is created), exactly as NIXL's ``nixlTelemetry`` is.

    Telemetry is on when ``NIXL_TELEMETRY_ENABLE`` says so, or, when that variable is unset,
    when ``capture`` is true. Events go to the exporter the environment chooses: the
    shared-memory ring ``BUFFER`` (``NIXL_TELEMETRY_DIR``), ``NOP``, ``TRACE`` or a plug-in
    (``prometheus``, ...). A background thread flushes them every
    ``NIXL_TELEMETRY_RUN_INTERVAL`` ms; :meth:`flush` does it now, and :meth:`close` (or leaving
    the ``with`` block, or interpreter exit) performs the final flush::

        with Telemetry("agent-0") as telemetry:
            telemetry.add_xfer_stats(120, is_write=True, bytes=1 << 20, post_time_us=8)
            telemetry.update("agent_memory_registered", 4096)
            telemetry.update_error(-3)  # NIXL_ERR_BACKEND

    When telemetry is not requested, or a plug-in's scrape port is held by another process,
    the object is disabled (:attr:`enabled` False, :attr:`disabled_reason` says why) and every
    call does nothing. An invalid setting or agent name raises
    :class:`~nixl_telemetry.InvalidArgumentError`. Safe to use from several threads.
    """

    def __init__(self, agent_name: str, capture: bool = True) -> None:
        """Creates the telemetry of ``agent_name`` (unique per process, and per
        ``NIXL_TELEMETRY_DIR`` for the ring exporter)."""
        if not isinstance(agent_name, str):
            raise InvalidArgumentError(
                f"agent_name must be a str, got {type(agent_name).__name__}"
            )
        agent, status, reason = _native.open_collector(agent_name, bool(capture))
        super().__init__(agent, _native.COLLECTOR_STATS_FIELDS, reason if status else None)
        self._agent: _native.Agent = agent
        self._agent_name = agent_name

    @property
    def agent_name(self) -> str:
        """The agent's name."""
        return self._agent_name

    @property
    def exporter(self) -> str | None:
        """The exporter's name (``BUFFER``, ``NOP``, ``TRACE``, a plug-in's), None when
        disabled or closed."""
        return self._agent.exporter()

    def update(self, event: str | int, value: int) -> Recorded:
        """Records one event: ``event`` is NIXL's name (``"agent_tx_bytes"``) or numeric type,
        ``value`` an unsigned 64-bit reading."""
        return _RECORDED[self._agent.update(event, value)]

    def add_xfer_stats(
        self, xfer_time_us: int, is_write: bool, bytes: int, post_time_us: int
    ) -> Recorded:
        """Records a completed transfer as one all-or-none batch, in NIXL's order:
        ``agent_xfer_post_time``, ``agent_xfer_time``, ``agent_tx_bytes`` (``agent_rx_bytes``
        when not ``is_write``) and ``agent_tx_requests_num`` (``rx``) = 1, each one only if its
        metric is enabled."""
        return _RECORDED[self._agent.add_xfer_stats(xfer_time_us, bool(is_write), bytes, post_time_us)]

    def update_error(self, status: int) -> Recorded:
        """Records one error for a negative ``nixl_status_t`` (-1 ``NIXL_ERR_NOT_POSTED`` ..
        -12 ``NIXL_ERR_NO_TELEMETRY``, and -13 ``NIXL_ERR_XFER_STALLED`` of NIXL's open pull
        request #2047) as its ``agent_err_*`` event; a stalled transfer is recorded as
        ``agent_err_unknown`` unless ``NIXL_TELEMETRY_XFER_STALLED_EVENT`` is true."""
        return _RECORDED[self._agent.update_error(status)]

    def flush(self) -> None:
        """Hands every staged event to the exporter now."""
        self._agent.flush()

    def stats(self) -> dict[str, int]:
        """The counters since creation: ``events_accepted``, ``events_dropped`` (refused by the
        full staging queue), ``events_exported``, ``events_lost`` (the exporter could not keep
        them, e.g. a full ring), ``flushes`` and ``drop_reports``. After :meth:`close`,
        ``events_exported + events_lost == events_accepted + drop_reports``."""
        return super().stats()

    def close(self) -> dict[str, int]:
        """Stops the flush thread, performs the final flush and returns the final counters.
        Idempotent."""
        return super().close()

    def __repr__(self) -> str:
        state = f"exporter={self.exporter!r}" if self.enabled else "disabled"
        return f"Telemetry({self._agent_name!r}, {state})"
