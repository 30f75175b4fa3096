"""FpmTrace: every payload kind, rejected and dropped payloads counted (never raised), tracing
off or misconfigured, close and interpreter exit, sampling, threads and fork.

The library reads ``DYN_FPM_*`` once per process: each test that traces runs a child
interpreter with its settings (``run_python``); this process keeps tracing off.
"""

from __future__ import annotations

import json

import pytest

from helpers import fpm_env, payload, run_python, trace_rows
from nixl_telemetry import FpmTrace, InvalidArgumentError

BALANCE = "recorded == dropped + rejected + coalesced + written + rows_lost"


def balanced(stats: dict[str, int]) -> bool:
    return stats["recorded"] == sum(
        stats[k] for k in ("dropped", "rejected", "coalesced", "written", "rows_lost")
    )


def test_exit_without_close_writes_every_row(tmp_path):
    # One trace is a module global; the other is held by a daemon thread that is still
    # running at exit, so it is never garbage-collected: only the exit hook closes it.
    code = """
        import json, threading
        from helpers import payload
        from nixl_telemetry import FpmTrace

        def worker(recorded):
            held = FpmTrace("default", "backend", "daemon")
            for i in range(50):
                held.record(payload(counter_id=i))
            recorded.set()
            threading.Event().wait()

        recorded = threading.Event()
        threading.Thread(target=worker, args=(recorded,), daemon=True).start()
        trace = FpmTrace("default", "backend", "4192")
        for i in range(50):
            trace.record(payload(counter_id=i))
        recorded.wait()
        print(json.dumps([trace.enabled, trace.prefix]))
    """
    enabled, prefix = run_python(code, fpm_env(tmp_path))
    assert enabled and prefix == str(tmp_path / "fpm.4192")
    for producer in ("4192", "daemon"):
        rows = trace_rows(tmp_path / f"fpm.{producer}")
        assert [row["event"]["fpm"]["counter_id"] for row in rows] == list(range(50))
    event = trace_rows(prefix)[0]["event"]
    assert event["schema"] == "dynamo.fpm.trace.v1"
    assert event["source"] == {"namespace": "default", "component": "backend", "producer_id": "4192"}
    assert event["capture_mode"] == "full"
    assert event["fpm"] == payload(counter_id=0)


def test_every_payload_kind_is_recorded(tmp_path):
    code = """
        import dataclasses, json, types
        from helpers import msgpack, payload
        from nixl_telemetry import (
            ForwardPassMetrics, FpmTrace, QueuedRequestMetrics, ScheduledRequestMetrics
        )

        @dataclasses.dataclass
        class Mine:                      # a dataclass of the caller's, with an extra field
            version: int
            worker_id: str
            dp_rank: int
            counter_id: int
            wall_time: float
            scheduled_requests: dict
            queued_requests: ScheduledRequestMetrics
            timing_scope: str = "execute_model_cuda"

        class Struct:                    # shaped like a msgspec Struct
            __struct_fields__ = tuple(payload())
            def __init__(self, **fields):
                for name, value in fields.items():
                    setattr(self, name, value)

        base = payload()
        typed = ForwardPassMetrics(
            worker_id="4192", counter_id=5, wall_time=0.25,
            scheduled_requests=ScheduledRequestMetrics(num_decode_requests=3),
            queued_requests=QueuedRequestMetrics(sum_prefill_tokens=7),
        )
        with FpmTrace("default", "backend", "w") as trace:
            trace.record(payload(counter_id=0, timing_scope="x", extend_lengths=[1, 2]))
            trace.record(msgpack(payload(counter_id=1)))
            trace.record(bytearray(msgpack(payload(counter_id=2))))
            trace.record(memoryview(msgpack(payload(counter_id=3))))
            trace.record(types.MappingProxyType(payload(counter_id=4)))
            trace.record(typed)
            trace.record(Mine(**dict(base, counter_id=6, queued_requests=QueuedRequestMetrics())))
            trace.record(Struct(**payload(counter_id=7)))
        print(json.dumps([trace.prefix, trace.stats()]))
    """
    prefix, stats = run_python(code, fpm_env(tmp_path))
    assert (stats["recorded"], stats["written"], stats["rejected"]) == (8, 8, 0)
    fpms = [row["event"]["fpm"] for row in trace_rows(prefix)]
    assert [f["counter_id"] for f in fpms] == list(range(8))
    assert fpms[0] == payload(counter_id=0, timing_scope="x", extend_lengths=[1, 2])
    for i in (1, 2, 3, 4, 7):
        assert fpms[i] == payload(counter_id=i)
    assert fpms[5]["worker_id"] == "4192" and fpms[5]["wall_time"] == 0.25
    assert fpms[5]["scheduled_requests"]["num_decode_requests"] == 3
    assert fpms[5]["queued_requests"]["sum_prefill_tokens"] == 7
    assert "sum_prefill_kv_tokens" not in fpms[5]["queued_requests"]
    assert fpms[6]["timing_scope"] == "execute_model_cuda"


def test_invalid_payloads_are_counted_never_raised(tmp_path):
    code = """
        import json, math
        from helpers import msgpack, payload
        from nixl_telemetry import FpmTrace

        class Raises:
            __struct_fields__ = ("version",)
            @property
            def version(self):
                raise RuntimeError("no")

        nested = payload()
        nested["self"] = nested              # a cycle: not followed forever
        twice = []
        twice += [twice, twice]              # nor 2**depth times
        bad = [
            b"not-msgpack", b"", bytearray(b"\\xc1"),
            msgpack(1),                                            # not a map
            payload(version=2), payload(version=1.0), payload(version=True),
            payload(dp_rank=-1), payload(counter_id=2**63), payload(worker_id=4192),
            payload(wall_time=math.nan), payload(wall_time=-1.0), payload(wall_time=math.inf),
            payload(scheduled_requests={}), payload(queued_requests=[1]),
            payload(extra={1, 2}), payload(extra=object()), payload(extra=b"bytes"),
            payload(extra=2**70), payload(extra="\\ud800"), {1: "int key"},
            {**payload(), "nested": {(1, 2): 3}}, nested, payload(extra=twice), Raises(), {},
        ]
        with FpmTrace("default", "backend", "bad") as trace:
            for p in bad:
                trace.record(p)
        print(json.dumps([len(bad), trace.stats()]))
    """
    count, stats = run_python(code, fpm_env(tmp_path))
    assert stats["recorded"] == count and stats["rejected"] == count
    assert stats["written"] == 0 and balanced(stats), BALANCE
    assert trace_rows(tmp_path / "fpm.bad") == []


def test_wrong_kinds_of_argument_raise(tmp_path):
    code = """
        import json
        from nixl_telemetry import FpmTrace, InvalidArgumentError
        errors = []
        with FpmTrace("default", "backend", "args") as trace:
            for p in (42, "a string", None, [1, 2], FpmTrace, 1.5):
                try:
                    trace.record(p)
                    errors.append(None)
                except InvalidArgumentError as e:
                    errors.append(str(e))
        print(json.dumps([errors, trace.stats()["recorded"]]))
    """
    errors, recorded = run_python(code, fpm_env(tmp_path))
    assert all(e and "an FPM payload must be a dict" in e for e in errors), errors
    assert recorded == 0


def test_a_disabled_trace_checks_arguments_and_does_nothing():
    # This process never enables tracing (see conftest).
    trace = FpmTrace("default", "backend", "4192")
    assert not trace.enabled and trace.prefix is None
    assert "DYN_FPM_TRACE is unset or false" in (trace.disabled_reason or "")
    trace.record(payload())
    trace.record(b"anything")
    trace.flush()
    assert trace.stats() == dict.fromkeys(trace.stats(), 0) and len(trace.stats()) == 9
    with pytest.raises(InvalidArgumentError):
        trace.record(42)  # type: ignore[arg-type]
    assert trace.close() == dict.fromkeys(trace.stats(), 0)
    for args in ((1, "c", "p"), ("n", None, "p"), ("n", "c", b"p")):
        with pytest.raises(InvalidArgumentError):
            FpmTrace(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({"DYN_FPM_TRACE": "0"}, "DYN_FPM_TRACE is unset or false"),
        ({"DYN_FPM_TRACE": "maybe"}, "DYN_FPM_TRACE='maybe'"),
        ({"DYN_FPM_MAX_SEGMENTS": "0"}, "DYN_FPM_MAX_SEGMENTS='0'"),
        ({"DYN_FPM_MODE": "all"}, "DYN_FPM_MODE='all'"),
        ({"DYN_FPM_OUTPUT_PATH": "{tmp}/file/fpm"}, "not writable"),
    ],
)
def test_tracing_off_or_misconfigured_never_fails_the_caller(settings, reason, tmp_path):
    (tmp_path / "file").write_text("a regular file, so no directory can be made under it")
    env = fpm_env(tmp_path)
    env.update({k: v.format(tmp=tmp_path) for k, v in settings.items()})
    code = """
        import json
        from helpers import payload
        from nixl_telemetry import FpmTrace, InvalidArgumentError
        with FpmTrace("default", "backend", "off") as trace:
            trace.record(payload())
            trace.flush()
            try:
                trace.record(3)
                raised = False
            except InvalidArgumentError:
                raised = True
        print(json.dumps([trace.enabled, trace.disabled_reason, raised, trace.stats()]))
    """
    enabled, disabled_reason, raised, stats = run_python(code, env)
    assert not enabled and reason in disabled_reason
    assert raised and set(stats.values()) == {0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_producer_written_by_another_process_is_disabled_not_raised(tmp_path):
    # The first process holds the producer's files (their lock); a second process opening the
    # same producer gets a disabled trace, and the first one's other component shares them.
    second = """
        import json
        from helpers import payload
        from nixl_telemetry import FpmTrace
        trace = FpmTrace("default", "backend", "dup")
        trace.record(payload(counter_id=1))
        print(json.dumps([trace.enabled, trace.disabled_reason, trace.close()["recorded"]]))
    """
    code = f"""
        import json
        from helpers import payload, run_python
        from nixl_telemetry import FpmTrace
        first = FpmTrace("default", "backend", "dup")
        other = FpmTrace("default", "router", "dup")
        first.record(payload(counter_id=2))
        other.record(payload(counter_id=3))
        from_second = run_python({second!r})
        other.close()
        print(json.dumps([from_second, first.close()]))
    """
    (enabled, reason, recorded), stats = run_python(code, fpm_env(tmp_path))
    assert not enabled and "dup" in reason and recorded == 0
    assert (stats["recorded"], stats["written"]) == (2, 2)
    rows = trace_rows(tmp_path / "fpm.dup")
    got = sorted((r["event"]["source"]["component"], r["event"]["fpm"]["counter_id"]) for r in rows)
    assert got == [("backend", 2), ("router", 3)]


def test_close_writes_everything_and_is_final(tmp_path):
    code = """
        import json
        from helpers import payload, trace_rows
        from nixl_telemetry import FpmTrace
        with FpmTrace("default", "backend", "c") as trace:
            for i in range(3):
                trace.record(payload(counter_id=i))
            assert trace.enabled
        on_disk = len(trace_rows(trace.prefix)) if trace.prefix else -1
        final = trace.stats()
        trace.record(payload(counter_id=9))        # after close: ignored
        trace.flush()
        print(json.dumps([on_disk, final, trace.close(), trace.stats(), trace.enabled]))
    """
    on_disk, final, closed_again, later, enabled = run_python(code, fpm_env(tmp_path))
    assert on_disk == 3 and final["written"] == 3
    assert closed_again == later == final and not enabled


def test_sampled_mode_keeps_the_newest_payload_per_rank(tmp_path):
    code = """
        import json
        from helpers import payload
        from nixl_telemetry import FpmTrace
        with FpmTrace("default", "backend", "s") as trace:
            for i in range(3):
                trace.record(payload(counter_id=i))
                trace.record(payload(counter_id=10 + i, dp_rank=1))
        print(json.dumps(trace.stats()))
    """
    env = fpm_env(tmp_path, mode="sampled", DYN_FPM_SAMPLE_INTERVAL_MS="3600000")
    stats = run_python(code, env)
    assert (stats["written"], stats["coalesced"]) == (2, 4) and balanced(stats), BALANCE
    rows = trace_rows(tmp_path / "fpm.s")
    assert sorted(r["event"]["fpm"]["counter_id"] for r in rows) == [2, 12]
    assert {r["event"]["capture_mode"] for r in rows} == {"sampled"}


def test_a_burst_never_blocks_and_every_payload_is_accounted_for(tmp_path):
    code = """
        import json, time
        from helpers import msgpack, payload
        from nixl_telemetry import FpmTrace
        trace = FpmTrace("default", "backend", "burst")
        encoded = [msgpack(payload(counter_id=i)) for i in range(20000)]
        slowest = 0.0
        for p in encoded:
            start = time.perf_counter()
            trace.record(p)
            slowest = max(slowest, time.perf_counter() - start)
        print(json.dumps([trace.close(), slowest]))
    """
    stats, slowest = run_python(code, fpm_env(tmp_path))
    assert stats["recorded"] == 20000 and balanced(stats), BALANCE
    assert stats["written"] + stats["dropped"] == 20000
    assert len(trace_rows(tmp_path / "fpm.burst")) == stats["written"]
    # Generous: a record call only copies into the queue; it never waits for the writer.
    assert slowest < 0.5


def test_threads_record_concurrently(tmp_path):
    code = """
        import json, threading
        from helpers import payload
        from nixl_telemetry import FpmTrace
        trace = FpmTrace("default", "backend", "t")
        def produce(rank):
            for i in range(500):
                trace.record(payload(counter_id=i, dp_rank=rank))
        threads = [threading.Thread(target=produce, args=(r,)) for r in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(json.dumps(trace.close()))
    """
    stats = run_python(code, fpm_env(tmp_path))
    assert (stats["recorded"], stats["written"], stats["dropped"]) == (2000, 2000, 0)
    rows = trace_rows(tmp_path / "fpm.t")
    for rank in range(4):
        counters = [r["event"]["fpm"]["counter_id"] for r in rows if r["event"]["fpm"]["dp_rank"] == rank]
        assert counters == list(range(500)), "each thread's payloads stay in order"


def test_a_forked_child_leaves_the_parents_trace_alone(tmp_path):
    code = """
        import json, os, sys
        from helpers import payload
        from nixl_telemetry import FpmTrace
        trace = FpmTrace("default", "backend", "fork")
        for i in range(5):
            trace.record(payload(counter_id=i))
        child = os.fork()
        if child == 0:
            # The child has no writer thread: the inherited trace is disabled, and exiting
            # (which closes open traces) must neither hang nor write.
            ok = not trace.enabled and "fork" in trace.disabled_reason
            trace.record(payload(counter_id=99))
            trace.flush()
            sys.exit(0 if ok and trace.close()["recorded"] == 0 else 3)
        _, status = os.waitpid(child, 0)
        for i in range(5, 10):
            trace.record(payload(counter_id=i))
        print(json.dumps([os.waitstatus_to_exitcode(status), trace.enabled]))
    """
    child_exit, parent_enabled = run_python(code, fpm_env(tmp_path), timeout=60)
    assert child_exit == 0 and parent_enabled
    counters = [r["event"]["fpm"]["counter_id"] for r in trace_rows(tmp_path / "fpm.fork")]
    assert counters == list(range(10))


def test_payload_helper_matches_dynamo_fields():
    # The test payload is a complete ForwardPassMetrics (the dataclass has the same fields).
    from dataclasses import asdict

    from nixl_telemetry import ForwardPassMetrics

    reference = asdict(ForwardPassMetrics())
    sample = payload()
    assert sample.keys() == reference.keys()
    for nested in ("scheduled_requests", "queued_requests"):
        assert sample[nested].keys() == reference[nested].keys()
    assert json.loads(json.dumps(sample)) == sample
