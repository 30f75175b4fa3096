"""Telemetry: NIXL's event order, the final flush, disabled agents, invalid arguments and
settings, drops, deactivated metrics, threads and interpreter exit."""

from __future__ import annotations

import socket
import threading

import pytest

from helpers import run_python
from nixl_telemetry import (
    EVENT_NAMES,
    InvalidArgumentError,
    NotAllowedError,
    Recorded,
    RingReader,
    Telemetry,
)


def drain(path) -> list[tuple[int, int]]:
    with RingReader(path) as reader:
        return [(e.type, e.value) for e in reader]


def test_events_reach_the_ring_in_nixl_order(ring_env):
    with Telemetry("agent-0") as telemetry:
        assert telemetry.enabled and telemetry.disabled_reason is None
        assert (telemetry.agent_name, telemetry.exporter) == ("agent-0", "BUFFER")
        assert telemetry.update("agent_tx_bytes", 100) is Recorded.ACCEPTED
        assert telemetry.update(4, 4096) is Recorded.ACCEPTED
        assert telemetry.add_xfer_stats(500, True, 1024, 50) is Recorded.ACCEPTED
        assert telemetry.add_xfer_stats(700, is_write=False, bytes=2048, post_time_us=70) is Recorded.ACCEPTED
        assert telemetry.update_error(-3) is Recorded.ACCEPTED
        telemetry.flush()
        assert drain(ring_env / "agent-0") == [
            (0, 100),
            (4, 4096),
            (7, 50), (6, 500), (0, 1024), (2, 1),
            (7, 70), (6, 700), (1, 2048), (3, 1),
            (10, 1),
        ]
        stats = telemetry.stats()
    assert stats == {
        "events_accepted": 11,
        "events_dropped": 0,
        "events_exported": 11,
        "events_lost": 0,
        "flushes": 1,
        "drop_reports": 0,
    }


def test_leaving_the_block_performs_the_final_flush(ring_env):
    with Telemetry("final") as telemetry:
        telemetry.update("agent_rx_bytes", 9)
        assert drain(ring_env / "final") == []
    assert not telemetry.enabled and telemetry.exporter is None
    assert drain(ring_env / "final") == [(1, 9)]
    final = telemetry.stats()
    assert final["events_exported"] == 1 and final["flushes"] == 1
    assert telemetry.close() == final, "close is idempotent"
    assert telemetry.update("agent_rx_bytes", 1) is Recorded.DISABLED
    assert telemetry.stats() == final


@pytest.mark.parametrize(
    "enable, capture, enabled",
    [(None, False, False), (None, True, True), ("0", True, False), ("yes", False, True)],
)
def test_enable_setting_and_capture_decide(enable, capture, enabled, ring_env, monkeypatch):
    if enable is not None:
        monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", enable)
    telemetry = Telemetry("maybe", capture=capture)
    assert telemetry.enabled is enabled
    assert (ring_env / "maybe").exists() is enabled
    if not enabled:
        assert "not requested" in (telemetry.disabled_reason or "")
        assert telemetry.update("agent_tx_bytes", 1) is Recorded.DISABLED
        assert telemetry.add_xfer_stats(1, True, 1, 1) is Recorded.DISABLED
        assert telemetry.update_error(-1) is Recorded.DISABLED
        telemetry.flush()
        assert telemetry.stats() == dict.fromkeys(telemetry.stats(), 0)
        assert len(telemetry.stats()) == 6
    telemetry.close()


def test_invalid_arguments_raise_even_when_disabled(ring_env):
    enabled = Telemetry("args")
    disabled = Telemetry("off", capture=False)
    for telemetry in (enabled, disabled):
        bad_calls = [
            lambda: telemetry.update("agent_tx_byte", 1),
            lambda: telemetry.update(22, 1),
            lambda: telemetry.update(-1, 1),
            lambda: telemetry.update(None, 1),  # type: ignore[arg-type]
            lambda: telemetry.update("agent_tx_bytes", -1),
            lambda: telemetry.update("agent_tx_bytes", 2**64),
            lambda: telemetry.update("agent_tx_bytes", 1.5),  # type: ignore[arg-type]
            lambda: telemetry.add_xfer_stats(-5, True, 1, 1),
            lambda: telemetry.add_xfer_stats(5, True, "1", 1),  # type: ignore[arg-type]
            lambda: telemetry.update_error(0),
            lambda: telemetry.update_error(-14),
            lambda: telemetry.update_error(1),
            lambda: telemetry.update_error("backend"),  # type: ignore[arg-type]
        ]
        for call in bad_calls:
            with pytest.raises(InvalidArgumentError):
                call()
    assert enabled.update("agent_tx_bytes", 2**64 - 1) is Recorded.ACCEPTED
    enabled.close()
    assert drain(ring_env / "args") == [(0, 2**64 - 1)]
    with pytest.raises(InvalidArgumentError):
        Telemetry(b"agent")  # type: ignore[arg-type]


def test_invalid_settings_and_names_raise(ring_env, monkeypatch):
    with pytest.raises(InvalidArgumentError, match="agent name"):
        Telemetry("a/b")
    with pytest.raises(InvalidArgumentError, match="non-empty agent name"):
        Telemetry("")
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "lots")
    with pytest.raises(InvalidArgumentError, match="NIXL_TELEMETRY_BUFFER_SIZE") as raised:
        Telemetry("agent")
    assert raised.value.status == -2 and isinstance(raised.value, ValueError)


def test_a_scrape_port_held_elsewhere_disables_telemetry(cargo_lib_dir, monkeypatch):
    plugin = cargo_lib_dir / "libtelemetry_exporter_prometheus.so"
    assert plugin.is_file(), f"{plugin} not built"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        monkeypatch.setenv("NIXL_TELEMETRY_EXPORTER", "prometheus")
        monkeypatch.setenv("NIXL_PLUGIN_DIR", str(cargo_lib_dir))
        monkeypatch.setenv("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "1")
        monkeypatch.setenv("NIXL_TELEMETRY_PROMETHEUS_PORT", str(held.getsockname()[1]))
        telemetry = Telemetry("collides")
    assert not telemetry.enabled
    assert "could not be bound" in (telemetry.disabled_reason or "")
    assert telemetry.update("agent_tx_bytes", 1) is Recorded.DISABLED


def test_a_ring_has_one_writer(ring_env):
    with Telemetry("twice"):
        with pytest.raises(NotAllowedError, match="already being written"):
            Telemetry("twice")


def test_drops_are_counted_and_reported(ring_env, monkeypatch):
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "8")
    with Telemetry("small") as telemetry:
        results = [telemetry.update("agent_tx_bytes", i) for i in range(6)]
        assert results == [Recorded.ACCEPTED] * 6
        # A transfer's 4 events are all-or-none: 2 free slots are not enough.
        assert telemetry.add_xfer_stats(1, True, 1, 1) is Recorded.DROPPED
        assert telemetry.stats()["events_dropped"] == 4
        telemetry.flush()
        events = drain(ring_env / "small")
    # The 6 staged events, then the drop report (event 20) with the number dropped.
    assert events == [(0, i) for i in range(6)] + [(20, 4)]
    stats = telemetry.stats()
    assert (stats["drop_reports"], stats["events_exported"], stats["events_lost"]) == (1, 7, 0)


def test_deactivated_metrics_are_skipped(ring_env, monkeypatch):
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLED_METRICS", "agent_rx_*,agent_xfer_time")
    with Telemetry("filtered") as telemetry:
        assert telemetry.update("agent_tx_bytes", 1) is Recorded.DEACTIVATED
        assert telemetry.add_xfer_stats(5, False, 10, 1) is Recorded.ACCEPTED
        telemetry.flush()
        assert drain(ring_env / "filtered") == [(6, 5), (1, 10), (3, 1)]


def test_event_types_by_number_and_name(ring_env):
    with Telemetry("all") as telemetry:
        for event_type, name in enumerate(EVENT_NAMES):
            telemetry.update(event_type, event_type)
            telemetry.update(name, 100 + event_type)
        telemetry.flush()
        events = drain(ring_env / "all")
    # agent_err_xfer_stalled (21) is recorded as agent_err_unknown (15): the setting is unset.
    recorded = [15 if t == 21 else t for t in range(22)]
    assert events == [e for t in range(22) for e in ((recorded[t], t), (recorded[t], 100 + t))]


@pytest.mark.parametrize("setting,recorded", [(None, 15), ("true", 21), ("false", 15)])
def test_a_stalled_transfer_is_recorded_as_the_setting_says(ring_env, monkeypatch, setting, recorded):
    if setting is not None:
        monkeypatch.setenv("NIXL_TELEMETRY_XFER_STALLED_EVENT", setting)
    with Telemetry("stalled") as telemetry:
        assert telemetry.update_error(-13) is Recorded.ACCEPTED
        assert telemetry.update("agent_err_xfer_stalled", 1) is Recorded.ACCEPTED
        telemetry.flush()
        events = drain(ring_env / "stalled")
    assert events == [(recorded, 1), (recorded, 1)]


def test_threads_record_concurrently(monkeypatch):
    monkeypatch.setenv("NIXL_TELEMETRY_EXPORTER", "NOP")
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "65536")
    telemetry = Telemetry("threads")

    def produce() -> None:
        for i in range(1000):
            telemetry.add_xfer_stats(i, i % 2 == 0, i, 1)
            if i % 100 == 0:
                telemetry.flush()

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = telemetry.close()
    assert stats["events_accepted"] == 4 * 1000 * 4
    assert stats["events_dropped"] == 0
    assert stats["events_exported"] == stats["events_accepted"]


def test_interpreter_exit_flushes_open_telemetry(ring_env):
    # Held by a daemon thread still running at exit: never garbage-collected, flushed by the
    # exit hook.
    code = """
        import json, threading
        from nixl_telemetry import Telemetry

        def agent(recorded):
            telemetry = Telemetry("exiting")
            telemetry.update("agent_tx_bytes", 42)
            telemetry.add_xfer_stats(3, False, 5, 1)
            recorded.set()
            threading.Event().wait()

        recorded = threading.Event()
        threading.Thread(target=agent, args=(recorded,), daemon=True).start()
        print(json.dumps(recorded.wait(60)))
    """
    env = {"NIXL_TELEMETRY_DIR": str(ring_env), "NIXL_TELEMETRY_RUN_INTERVAL": "3600000"}
    assert run_python(code, env) is True
    assert drain(ring_env / "exiting") == [(0, 42), (7, 1), (6, 3), (1, 5), (3, 1)]
