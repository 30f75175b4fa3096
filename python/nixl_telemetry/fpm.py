"""Writing Dynamo's forward-pass-metrics (FPM) traces: rolling gzip JSONL segments
``<DYN_FPM_OUTPUT_PATH>.<producer>.<index>.jsonl.gz``, one ``dynamo.fpm.trace.v1`` record per
line, configured by the ``DYN_FPM_*`` environment."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Union

from nixl_telemetry import _native
from nixl_telemetry._handle import Handle
from nixl_telemetry.errors import InvalidArgumentError

__all__ = [
    "FpmPayload",
    "FpmTrace",
    "ForwardPassMetrics",
    "QueuedRequestMetrics",
    "ScheduledRequestMetrics",
]

_log = logging.getLogger("nixl_telemetry")


@dataclass(frozen=True)
class ScheduledRequestMetrics:
    """Requests scheduled in this iteration (Dynamo's ``ScheduledRequestMetrics``)."""

    num_prefill_requests: int = 0
    #: Tokens freshly computed for prefill (the chunk size).
    sum_prefill_tokens: int = 0
    #: Population variance of the full prompt lengths.
    var_prefill_length: float = 0.0
    #: KV tokens read for prefill (prefix hits plus earlier chunks).
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    #: Total decode context.
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


@dataclass(frozen=True)
class QueuedRequestMetrics:
    """Requests waiting, not scheduled (Dynamo's ``QueuedRequestMetrics``; it has no
    ``sum_prefill_kv_tokens``)."""

    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    #: Preempted decode requests.
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


@dataclass(frozen=True)
class ForwardPassMetrics:
    """One forward pass's metrics (Dynamo's ``ForwardPassMetrics``, version 1). The defaults
    make an idle heartbeat (``wall_time`` 0)."""

    version: int = 1
    #: The engine instance's runtime connection id.
    worker_id: str = ""
    #: Data-parallel rank.
    dp_rank: int = 0
    #: Per-(worker, rank) sequence number; heartbeats advance it too.
    counter_id: int = 0
    #: Iteration duration in seconds; 0 for an idle heartbeat.
    wall_time: float = 0.0
    scheduled_requests: ScheduledRequestMetrics = field(default_factory=ScheduledRequestMetrics)
    queued_requests: QueuedRequestMetrics = field(default_factory=QueuedRequestMetrics)


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


class _Struct(Protocol):
    __struct_fields__: ClassVar[tuple[str, ...]]


#: What :meth:`FpmTrace.record` accepts: the msgpack map Dynamo publishes, as bytes; or a record
#: of ``ForwardPassMetrics`` fields (nested records included) as a dict or other mapping, a
#: dataclass instance (:class:`ForwardPassMetrics` or your own) or a msgspec ``Struct``.
FpmPayload = Union[bytes, bytearray, memoryview, Mapping[str, Any], _Dataclass, _Struct]


def _check_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    return value


class FpmTrace(Handle):
    """The FPM trace of one producer (an inference worker process, ``producer_id``) for one
    component, configured by ``DYN_FPM_*``, which the library reads once per process::

        with FpmTrace("default", "backend", producer_id="4192") as trace:
            trace.record(ForwardPassMetrics(worker_id="4192", counter_id=1, wall_time=0.025))
            # or a dict of the same fields, or the msgpack bytes Dynamo publishes

    Tracing never disturbs inference:

    - when it is off (``DYN_FPM_TRACE`` unset or false) or misconfigured, when the output
      location cannot be written, or when the producer's files are already being written (in
      this process or another), the trace is disabled: :attr:`enabled` is False,
      :attr:`disabled_reason` says why, and every call does nothing;
    - :meth:`record` never blocks and never raises for a payload: the library validates it
      (as Dynamo does) on its writer thread, counts it as ``rejected`` when invalid, and drops
      the oldest queued payloads, counted as ``dropped``, when its queue (8192) is full. Only an
      argument of the wrong kind raises :class:`~nixl_telemetry.InvalidArgumentError`.

    :meth:`close` (or leaving the ``with`` block) writes everything recorded; traces still open
    at interpreter exit are closed then. In ``sampled`` mode (the default) the newest payload
    per (namespace, component, worker_id, dp_rank) is written every
    ``DYN_FPM_SAMPLE_INTERVAL_MS``; in ``full`` mode every valid payload is. Thread-safe: record
    from any thread.
    """

    def __init__(self, namespace: str, component: str, producer_id: str) -> None:
        """Opens the trace; rows are stamped with ``namespace``, ``component`` and
        ``producer_id``. Components of one producer share its files and counters."""
        self._source = (
            _check_str("namespace", namespace),
            _check_str("component", component),
            _check_str("producer_id", producer_id),
        )
        fpm, kind, message = _native.open_fpm(namespace, component, producer_id)
        super().__init__(fpm, _native.FPM_STATS_FIELDS, None if kind is None else message)
        self._fpm: _native.Fpm = fpm
        if kind in ("already_open", "internal"):
            # The library warns about the other kinds itself.
            _log.warning("FPM trace disabled; continuing without local persistence: %s", message)

    @property
    def namespace(self) -> str:
        """The namespace stamped on this trace's rows."""
        return self._source[0]

    @property
    def component(self) -> str:
        """The component stamped on this trace's rows."""
        return self._source[1]

    @property
    def producer_id(self) -> str:
        """The producer id (unsanitized; file names use a sanitized form)."""
        return self._source[2]

    @property
    def prefix(self) -> str | None:
        """The producer prefix of the segment files (``<dir>/<stem>``; the files are
        ``<prefix>.<index>.jsonl.gz``), None when disabled."""
        return self._fpm.prefix()

    def record(self, payload: FpmPayload) -> None:
        """Records one FPM payload (see :data:`FpmPayload`). Returns at once."""
        self._fpm.record(payload)

    def flush(self) -> None:
        """Writes the rows buffered so far (one gzip member), without waiting for the writer's
        one-second cadence. Pending samples are written at their interval, or at close."""
        self._fpm.flush()

    def stats(self) -> dict[str, int]:
        """The counters of the producer's writer: ``recorded``, ``written``, ``dropped``,
        ``rejected``, ``write_errors``, ``segments_rolled``, ``segments_pruned``, ``coalesced``
        (sampled mode: replaced or unchanged payloads) and ``rows_lost``. After the last trace
        of the producer closed, ``recorded == dropped + rejected + coalesced + written +
        rows_lost``."""
        return super().stats()

    def close(self) -> dict[str, int]:
        """Writes everything recorded (pending samples included), closes the trace and returns
        the counters. Idempotent."""
        return super().close()

    def __repr__(self) -> str:
        state = f"prefix={self.prefix!r}" if self.enabled else "disabled"
        return f"FpmTrace({self.namespace!r}, {self.component!r}, {self.producer_id!r}, {state})"
