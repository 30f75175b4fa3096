"""RingReader and Event: NIXL's own rings (and our version-5 one) read exactly, refused files,
peeking, following a live ring, and agreement with the C library across a ring wrap, in both
layouts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import HEADER, ring_header, run_python
from nixl_telemetry import (
    Event,
    InvalidArgumentError,
    NixlTelemetryError,
    NotAllowedError,
    NotFoundError,
    Recorded,
    RingFormatError,
    RingReader,
    RingTruncatedError,
    RingVersionError,
    Telemetry,
)

FIXTURE_NAMES = [
    "nixl-ring-v4-cap16-wrapped.bin",
    "nixl-ring-v4-cap4096-empty.bin",
    "nixl-ring-v4-cap8-full.bin",
    # Ours: NIXL has not merged the version-5 layout, so no NIXL-written file exists.
    "nixl-telemetry-ring-v5-cap16-wrapped.bin",
]


def as_dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [{"type": e.type, "name": e.name, "value": e.value} for e in events]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_reads_rings_written_by_nixl_exactly(name, fixture_copy, nixl_rings, our_rings):
    expected = {**nixl_rings, **our_rings}[name]
    path = fixture_copy(name)
    with RingReader(path) as reader:
        assert reader.version == expected.get("version", 4)
        assert reader.capacity == expected["capacity"]
        assert len(reader) == len(expected["events"])
        assert as_dicts(reader.peek()) == expected["events"]
        assert len(reader) == len(expected["events"]), "peek consumes nothing"
        assert as_dicts(list(reader)) == expected["events"]
        assert len(reader) == 0
        assert reader.pop() is None
        assert list(reader) == []
    # Reading advanced read_pos in the file, as NIXL's readers do.
    header = ring_header(path)
    assert (header["read_pos"], header["write_pos"]) == (expected["write_pos"],) * 2


def test_event_fields_and_unknown_types(fixture_copy):
    path = fixture_copy("nixl-ring-v4-cap8-full.bin")
    first_record = HEADER.size + 16 * ring_header(path)["read_pos"]
    data = bytearray(path.read_bytes())
    data[first_record : first_record + 4] = (77).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    reader = RingReader(path)
    event = reader.pop()
    assert event is not None
    assert (event.name, event.type) == ("unknown_event_77", 77)
    second = reader.pop()
    assert second is not None and isinstance(second, Event)
    assert second == (second.name, second.type, second.value)
    assert not second.name.startswith("unknown_event_")


def test_peek_limits_and_follows_pops(fixture_copy):
    reader = RingReader(fixture_copy("nixl-ring-v4-cap16-wrapped.bin"))
    everything = reader.peek()
    assert reader.peek(3) == everything[:3]
    assert reader.peek(0) == []
    assert reader.peek(1000) == everything
    assert reader.pop() == everything[0]
    assert reader.peek() == everything[1:]
    for bad in (-1, 1.5, "3"):
        with pytest.raises(InvalidArgumentError):
            reader.peek(bad)  # type: ignore[arg-type]


def test_missing_file_is_not_found(tmp_path):
    missing = tmp_path / "agent-0"
    with pytest.raises(NotFoundError) as raised:
        RingReader(missing)
    error = raised.value
    assert isinstance(error, FileNotFoundError) and isinstance(error, NixlTelemetryError)
    assert str(error) == f"telemetry file {missing} does not exist"
    assert error.status == -4


@pytest.mark.parametrize(
    "name,size",
    [("nixl-ring-v4-cap16-wrapped.bin", size) for size in (0, 20, 39, 100, 40 + 16 * 16 - 1)]
    # Version 5: shorter than its 512-byte header, or than its records.
    + [("nixl-telemetry-ring-v5-cap16-wrapped.bin", size) for size in (100, 511, 512 + 255)],
)
def test_truncated_files_are_refused(name, size, fixture_copy):
    path = fixture_copy(name)
    path.write_bytes(path.read_bytes()[:size])
    with pytest.raises(RingTruncatedError) as raised:
        RingReader(path)
    assert isinstance(raised.value, RingFormatError)
    assert "truncated" in str(raised.value) or "too small" in str(raised.value)
    assert raised.value.status == -5


def test_a_foreign_version_is_refused_and_left_untouched(fixture_copy):
    path = fixture_copy("nixl-ring-v4-cap8-full.bin")
    data = bytearray(path.read_bytes())
    data[16:20] = (3).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(RingVersionError) as raised:
        RingReader(path)
    assert "version mismatch: expected 4 or 5, got 3" in str(raised.value)
    assert path.read_bytes() == bytes(data)


def test_other_damage_is_a_format_error(fixture_copy, tmp_path):
    path = fixture_copy("nixl-ring-v4-cap8-full.bin")
    data = bytearray(path.read_bytes())
    data[24:32] = (12).to_bytes(8, "little")  # capacity
    path.write_bytes(bytes(data))
    with pytest.raises(RingFormatError) as raised:
        RingReader(path)
    assert type(raised.value) is RingFormatError
    assert "not a power of two" in str(raised.value)
    with pytest.raises(NixlTelemetryError):
        RingReader(tmp_path)


def test_paths_and_closing(fixture_copy):
    path = fixture_copy("nixl-ring-v4-cap8-full.bin")
    reader = RingReader(Path(path))
    assert reader.path == str(path) and repr(reader) == f"RingReader({str(path)!r})"
    reader.close()
    reader.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        reader.pop()
    with pytest.raises(InvalidArgumentError):
        len(reader)
    with pytest.raises(InvalidArgumentError):
        RingReader(7)  # type: ignore[arg-type]


def test_follows_a_ring_being_written(ring_env):
    with Telemetry("live") as telemetry:
        reader = RingReader(ring_env / "live")
        assert reader.capacity == 4096 and len(reader) == 0
        for value in (1, 2, 3):
            telemetry.update("agent_rx_bytes", value)
        telemetry.flush()
        assert [e.value for e in reader] == [1, 2, 3]
        assert list(reader) == []
        telemetry.update("agent_memory_registered", 4096)
        telemetry.update_error(-6)
        telemetry.flush()
        assert len(reader) == 2
        assert [(e.name, e.value) for e in reader] == [
            ("agent_memory_registered", 4096),
            ("agent_err_not_allowed", 1),
        ]


@pytest.mark.parametrize("version", ["4", "5"])
def test_agrees_with_the_c_library_on_7000_events_across_a_wrap(
    ring_env, monkeypatch, c_ring_reader, version
):
    monkeypatch.setenv("NIXL_TELEMETRY_BUFFER_SIZE", "4096")
    monkeypatch.setenv("NIXL_TELEMETRY_RING_VERSION", version)
    # Every event type, the stalled transfer recorded as itself, values from 0 to 2**64 - 1.
    monkeypatch.setenv("NIXL_TELEMETRY_XFER_STALLED_EVENT", "true")
    events = [(i % 22, (i * 0x9E3779B97F4A7C15) % 2**64) for i in range(7000)]
    ring = ring_env / "wrap"
    snapshot = ring_env / "snapshot"
    with Telemetry("wrap") as telemetry, RingReader(ring) as reader:
        # 3,500 events, then 3,500 more: the second batch runs past the end of the 4,096 slots.
        for batch in (events[:3500], events[3500:]):
            for event_type, value in batch:
                assert telemetry.update(event_type, value) is Recorded.ACCEPTED
            telemetry.flush()
            shutil.copyfile(ring, snapshot)
            from_c = c_ring_reader.drain(snapshot)
            ours = [(e.type, e.value) for e in reader]
            assert ours == from_c == batch
        assert reader.version == int(version)
        header = ring_header(ring)
        assert header["version"] == int(version)
        assert header["write_pos"] == header["read_pos"] == 7000 % 4096
        assert telemetry.stats()["events_lost"] == 0


def test_faulthandler_enabled_after_the_agent_does_not_turn_a_truncated_ring_into_a_crash(ring_env):
    # pytest enables faulthandler too; the child enables it after creating the agent, as an
    # application would, then another process empties the ring. Before, the next flush ended
    # the interpreter with "Fatal Python error: Bus error".
    code = """
        import faulthandler, json, os
        from nixl_telemetry import RingFormatError, RingReader, Telemetry
        path = os.path.join(os.environ["NIXL_TELEMETRY_DIR"], "guarded")
        with Telemetry("guarded") as telemetry:
            telemetry.update("agent_tx_bytes", 1)
            telemetry.flush()
            faulthandler.enable()
            os.truncate(path, 0)
            # A flush either notices the truncation before writing or faults into the guard
            # (those events are counted as lost); a later one recreates the ring.
            values = []
            for value in range(2, 200):
                telemetry.update("agent_tx_bytes", value)
                telemetry.flush()
                try:
                    with RingReader(path) as reader:
                        values = [e.value for e in reader]
                except RingFormatError:
                    continue
                if values:
                    break
        print(json.dumps(len(values) > 0))
    """
    assert run_python(code, {"NIXL_TELEMETRY_DIR": str(ring_env)}) is True


def test_a_reader_learns_how_many_events_its_ring_lost(ring_env, fixture_copy):
    with Telemetry("lossy") as telemetry:
        reader = RingReader(ring_env / "lossy")
        assert reader.lost_events == 0
        # 4,096 slots, 4,095 usable: 1,023 whole transfers fit, the 1,024th does not and is
        # lost whole (the staging queue holds all 4,096 events, so there is no drop report).
        for i in range(1024):
            telemetry.add_xfer_stats(i, True, 1, 1)
        telemetry.flush()
        telemetry.flush()  # the count is written by the next flush at the latest
        assert reader.lost_events == 4
        assert len(reader) == 1023 * 4
        assert telemetry.stats()["events_lost"] == 4
    # A ring written by NIXL has no count.
    assert RingReader(fixture_copy("nixl-ring-v4-cap8-full.bin")).lost_events is None


def test_a_loss_count_others_may_write_is_reported_as_untrusted(ring_env):
    # Left before the agent started, writable by others: the writer refuses it and leaves it as it
    # is; a reader neither believes it nor takes it for "no count".
    lost = ring_env / ".shared.lost"
    lost.write_bytes(b"NIXLLOST" + bytes(16))
    os.chmod(lost, 0o666)
    with Telemetry("shared"):
        reader = RingReader(ring_env / "shared")
        with pytest.raises(NotAllowedError, match=r"\.shared\.lost is writable by group or others"):
            reader.lost_events
    assert lost.read_bytes() == b"NIXLLOST" + bytes(16)


def test_faulthandler_enabled_after_a_reader_opened_does_not_turn_a_truncated_ring_into_a_crash(ring_env):
    code = """
        import faulthandler, json, os
        from nixl_telemetry import RingReader, RingTruncatedError, Telemetry
        path = os.path.join(os.environ["NIXL_TELEMETRY_DIR"], "read")
        with Telemetry("read") as telemetry:
            telemetry.update("agent_tx_bytes", 1)
            telemetry.flush()
            reader = RingReader(path)
            faulthandler.enable()
            os.truncate(path, 0)
            try:
                reader.pop()
                outcome = "read"
            except RingTruncatedError:
                outcome = "refused"
        print(json.dumps(outcome))
    """
    assert run_python(code, {"NIXL_TELEMETRY_DIR": str(ring_env)}) == "refused"
