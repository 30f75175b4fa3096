"""Tests for telemetry_reader.py (NIXL telemetry ring reader, versions 4 and 5).

Run from the repository root with ``python3 -m pytest examples/python -q``.

The ring fixtures are read-only: every test copies them to ``tmp_path`` before
reading, because reading advances ``read_pos``. NIXL's own files are found via
``$NIXL_TELEMETRY_FIXTURES`` or the repository's copies in ``tests/fixtures``; when
``$NIXL_TELEMETRY_FIXTURES`` is set (scripts/test.sh sets it), missing fixtures fail the tests
instead of skipping them. The version-5 file is ours (NIXL has not merged that layout, so no
NIXL-written one exists) and always comes from ``tests/fixtures``.
"""

import json
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import telemetry_reader as tr  # noqa: E402

SCRIPT = HERE / "telemetry_reader.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
OURS = REPO_ROOT / "tests" / "fixtures"
FIXTURES = Path(os.environ.get("NIXL_TELEMETRY_FIXTURES") or OURS)
EXPECTED_JSON = FIXTURES / "nixl-rings.expected.json"
#: Our version-5 file and its expectations (same format, plus "version").
OURS_JSON = OURS / "nixl-telemetry-rings.expected.json"

#: Named by ``$NIXL_TELEMETRY_FIXTURES``: the fixtures must be there (no skip).
FIXTURES_REQUIRED = bool(os.environ.get("NIXL_TELEMETRY_FIXTURES"))

needs_fixtures = pytest.mark.skipif(
    not EXPECTED_JSON.is_file() and not FIXTURES_REQUIRED,
    reason="NIXL fixtures not found at %s" % FIXTURES,
)

SEPARATOR = "=" * 27


# --------------------------------------------------------------------------
# helpers


def make_ring(path, capacity, events=(), read_pos=0, version=4, mask=None,
              expected_version=4, padding=b"\xde\xad\xbe\xef", write_pos=None,
              truncate_to=None, layout=tr.LAYOUTS[4]):
    """Write a ring file like NIXL's writer: events pushed from read_pos on.

    ``events`` is a list of (type, value).  Padding bytes of every slot are
    filled with garbage so the reader is checked to ignore them.  The header
    is ``layout``'s, whatever ``version`` it says.
    """
    if mask is None:
        mask = capacity - 1
    slots = bytearray()
    for _ in range(capacity):
        slots += struct.pack("<I4sQ", 0xFFFFFFFF, padding, 0xFFFFFFFFFFFFFFFF)
    pos = read_pos
    for etype, value in events:
        struct.pack_into("<I4sQ", slots, 16 * pos, etype, padding, value)
        pos = (pos + 1) & mask
    if write_pos is None:
        write_pos = pos
    header = bytearray(layout.header_size)
    struct.pack_into("<Q", header, 0, write_pos)
    struct.pack_into("<Q", header, layout.read_pos_off, read_pos)
    struct.pack_into("<ii", header, 16, version, expected_version)
    struct.pack_into("<Q", header, layout.capacity_off, capacity)
    struct.pack_into("<Q", header, layout.mask_off, mask)
    data = bytes(header) + bytes(slots)
    if truncate_to is not None:
        data = data[:truncate_to]
    Path(path).write_bytes(data)
    return Path(path)


def layout_of(raw):
    """The layout of a ring file's bytes, from its version word."""
    return tr.LAYOUTS[struct.unpack_from("<i", raw, 16)[0]]


def push(path, etype, value):
    """Producer-side push into an existing ring file (for the live test)."""
    with open(path, "r+b") as f:
        hdr = f.read(512)
        layout = layout_of(hdr)
        write_pos = struct.unpack_from("<Q", hdr, 0)[0]
        read_pos = struct.unpack_from("<Q", hdr, layout.read_pos_off)[0]
        mask = struct.unpack_from("<Q", hdr, layout.mask_off)[0]
        assert ((write_pos + 1) & mask) != read_pos, "ring full"
        f.seek(layout.header_size + 16 * write_pos)
        f.write(struct.pack("<I4xQ", etype, value))
        f.flush()
        f.seek(0)
        f.write(struct.pack("<Q", (write_pos + 1) & mask))


def header_positions(path):
    raw = Path(path).read_bytes()
    layout = layout_of(raw)
    return (struct.unpack_from("<Q", raw, 0)[0],
            struct.unpack_from("<Q", raw, layout.read_pos_off)[0])


def drain(ring):
    out = []
    while True:
        ev = ring.pop()
        if ev is None:
            return out
        out.append(ev)


def event_block(name, value):
    return "\n=== NIXL Telemetry Event ===\nEvent: %s\nValue: %d\n%s\n" % (
        name, value, SEPARATOR)


def run_cli(*args, timeout=30):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True, text=True, timeout=timeout,
    )


def fixture_dirs():
    """Every ring fixture: name -> (directory, expectations); NIXL's, then ours."""
    found = {}
    if EXPECTED_JSON.is_file() or FIXTURES_REQUIRED:
        for name, exp in json.loads(EXPECTED_JSON.read_text()).items():
            found[name] = (FIXTURES, exp)
    for name, exp in json.loads(OURS_JSON.read_text()).items():
        found[name] = (OURS, exp)
    return found


def expected_fixtures():
    return {name: exp for name, (_dir, exp) in fixture_dirs().items()}


def copy_fixture(name, tmp_path):
    dst = tmp_path / name
    shutil.copyfile(fixture_dirs()[name][0] / name, dst)
    os.chmod(dst, 0o644)
    return dst


def assert_single_error_line(stderr, needle):
    assert "Traceback" not in stderr
    lines = [l for l in stderr.splitlines() if "Error: " in l]
    assert len(lines) == 1, stderr
    assert needle in lines[0], stderr


# --------------------------------------------------------------------------
# NIXL-written fixtures, and our version-5 one


@needs_fixtures
@pytest.mark.parametrize("name", sorted(expected_fixtures()))
def test_fixture_events_exact(name, tmp_path):
    exp = expected_fixtures()[name]
    path = copy_fixture(name, tmp_path)
    with tr.TelemetryRing(path) as ring:
        assert ring.version == exp.get("version", 4)
        assert ring.capacity == exp["capacity"]
        assert header_positions(path) == (exp["write_pos"], exp["read_pos"])
        assert ring.size() == len(exp["events"])
        got = drain(ring)
        assert ring.size() == 0
        assert ring.pop() is None
    assert got == [(e["type"], e["value"]) for e in exp["events"]]
    assert [tr.event_name(t) for t, _ in got] == [e["name"] for e in exp["events"]]
    # read_pos caught up with write_pos in the file itself
    assert header_positions(path) == (exp["write_pos"], exp["write_pos"])


@needs_fixtures
@pytest.mark.parametrize("name,read_pos_off", [("nixl-ring-v4-cap16-wrapped.bin", 8),
                                               ("nixl-telemetry-ring-v5-cap16-wrapped.bin", 256)])
def test_fixture_wrapped_read_pos_advances_in_file(name, read_pos_off, tmp_path):
    if name not in expected_fixtures():
        if FIXTURES_REQUIRED:
            pytest.fail("%s is not listed in %s" % (name, EXPECTED_JSON))
        pytest.skip("wrapped fixture not listed")
    path = copy_fixture(name, tmp_path)
    original = path.read_bytes()
    with tr.TelemetryRing(path) as ring:
        cap = ring.capacity
        write_pos, read_pos = header_positions(path)
        steps = (cap - read_pos) + 1  # cross the end of the ring
        for i in range(steps):
            assert ring.pop() is not None
            assert header_positions(path) == (write_pos, (read_pos + i + 1) % cap)
    after = path.read_bytes()
    # only read_pos (8 bytes at read_pos_off) was touched
    end = read_pos_off + 8
    assert after[:read_pos_off] == original[:read_pos_off] and after[end:] == original[end:]


@needs_fixtures
@pytest.mark.parametrize("name", sorted(expected_fixtures()))
def test_fixture_cli_once(name, tmp_path):
    exp = expected_fixtures()[name]
    path = copy_fixture(name, tmp_path)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "".join(event_block(e["name"], e["value"]) for e in exp["events"])
    assert "(version: %d)" % exp.get("version", 4) in res.stderr
    assert "Buffer capacity: %d events" % exp["capacity"] in res.stderr
    assert "Current events in buffer: %d" % len(exp["events"]) in res.stderr
    assert "Total events read: %d" % len(exp["events"]) in res.stderr
    assert "Final buffer size: 0 events" in res.stderr


@needs_fixtures
def test_fixtures_are_untouched():
    # The originals must never be written by the tests.
    for name, (directory, exp) in fixture_dirs().items():
        assert header_positions(directory / name) == (exp["write_pos"], exp["read_pos"])


# --------------------------------------------------------------------------
# self-written rings


def test_own_ring_roundtrip_with_garbage_padding(tmp_path):
    events = [(0, 4096), (1, 2**64 - 1), (6, 123), (20, 7), (99, 5)]
    path = make_ring(tmp_path / "r.bin", 8, events, read_pos=5)  # wraps
    with tr.TelemetryRing(path) as ring:
        assert ring.capacity == 8
        assert ring.size() == 5
        assert drain(ring) == events
    assert header_positions(path) == (2, 2)


def test_pop_advances_read_pos_in_file(tmp_path):
    path = make_ring(tmp_path / "r.bin", 4, [(2, 10), (3, 11), (4, 12)], read_pos=2)
    with tr.TelemetryRing(path) as ring:
        assert ring.pop() == (2, 10)
        assert header_positions(path) == (1, 3)
        assert ring.pop() == (3, 11)
        assert header_positions(path) == (1, 0)
        assert ring.pop() == (4, 12)
        assert header_positions(path) == (1, 1)
        assert ring.pop() is None
        assert header_positions(path) == (1, 1)


def test_reader_sees_events_pushed_after_open(tmp_path):
    path = make_ring(tmp_path / "r.bin", 4)
    with tr.TelemetryRing(path) as ring:
        assert ring.pop() is None
        for i in range(7):  # more than capacity in total: wraps twice
            push(path, 7, 100 + i)
            assert ring.size() == 1
            assert ring.pop() == (7, 100 + i)
        assert ring.pop() is None


def test_own_version_5_ring_wraps_and_ignores_padding(tmp_path):
    events = [(0, 4096), (21, 1), (6, 123), (20, 7), (99, 5)]
    path = make_ring(tmp_path / "r.bin", 8, events, read_pos=5, version=5,
                     expected_version=5, layout=tr.LAYOUTS[5])
    with tr.TelemetryRing(path) as ring:
        assert (ring.version, ring.capacity, ring.size()) == (5, 8, 5)
        assert drain(ring) == events
        assert ring.pop() is None
    assert header_positions(path) == (2, 2)
    # Only read_pos, at 256, moved.
    raw = path.read_bytes()
    assert struct.unpack_from("<QQ", raw, 0) == (2, 8)


def test_a_version_5_file_with_only_a_version_4_header_is_too_small(tmp_path):
    path = make_ring(tmp_path / "r.bin", 8, version=5)  # 40 + 128 bytes
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "too small for a version-5 telemetry header")


def test_event_names():
    assert tr.event_name(0) == "agent_tx_bytes"
    assert tr.event_name(5) == "agent_memory_deregistered"
    assert tr.event_name(7) == "agent_xfer_post_time"
    assert tr.event_name(17) == "agent_err_remote_disconnect"
    assert tr.event_name(20) == "agent_telemetry_events_dropped"
    assert tr.event_name(21) == "agent_err_xfer_stalled"
    assert tr.event_name(22) == "unknown_event_22"
    assert tr.event_name(4294967295) == "unknown_event_4294967295"


def test_cli_once_own_ring_exact_stdout(tmp_path):
    events = [(0, 1), (4, 65536), (22, 3)]
    path = make_ring(tmp_path / "r.bin", 4, events, read_pos=3)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (event_block("agent_tx_bytes", 1)
                          + event_block("agent_memory_registered", 65536)
                          + event_block("unknown_event_22", 3))
    for line in ("Telemetry path: %s" % path,
                 "Opening telemetry buffer: %s" % path,
                 "Auto-detected buffer size: 4",
                 "Successfully opened telemetry buffer (version: 4)",
                 "Buffer capacity: 4 events",
                 "Current events in buffer: 3",
                 "Event structure size: 16 bytes",
                 "Total events read: 3",
                 "Final buffer size: 0 events"):
        assert " - INFO - " + line in res.stderr, line
    assert header_positions(path) == (2, 2)


def test_main_in_process(tmp_path, capsys):
    path = make_ring(tmp_path / "r.bin", 2, [(6, 42)])
    assert tr.main(["--telemetry_path", str(path), "--once"]) == 0
    out, err = capsys.readouterr()
    assert out == event_block("agent_xfer_time", 42)
    assert "Total events read: 1" in err


# --------------------------------------------------------------------------
# errors


def test_missing_file(tmp_path):
    path = tmp_path / "nope.bin"
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert res.stdout == ""
    assert " - ERROR - Telemetry file %s does not exist" % path in res.stderr
    assert "Traceback" not in res.stderr


def test_missing_argument():
    res = run_cli()
    assert res.returncode == 2
    assert "--telemetry_path" in res.stderr


def test_wrong_version_leaves_file_unchanged(tmp_path):
    path = make_ring(tmp_path / "r.bin", 8, [(1, 2), (3, 4)], version=3)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert res.stdout == ""
    assert_single_error_line(res.stderr, "Error: Version mismatch: expected 4 or 5, got 3")
    assert path.exists()
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime


def test_wrong_version_api(tmp_path):
    path = make_ring(tmp_path / "r.bin", 8, version=6)
    before = path.read_bytes()
    with pytest.raises(tr.TelemetryError, match="Version mismatch: expected 4 or 5, got 6"):
        tr.TelemetryRing(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("size", [0, 1, 39])
def test_too_small_file(tmp_path, size):
    path = tmp_path / "small.bin"
    path.write_bytes(b"\x04" * size)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "too small")


@pytest.mark.parametrize("capacity", [0, 3, 6, 12])
def test_bad_capacity(tmp_path, capacity):
    path = make_ring(tmp_path / "r.bin", max(capacity, 1), mask=max(capacity - 1, 0))
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, 24, capacity)
    path.write_bytes(bytes(raw))
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "power of two")


def test_bad_mask(tmp_path):
    path = make_ring(tmp_path / "r.bin", 8, mask=15)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "mask")


@pytest.mark.parametrize("keep", [40, 41, 40 + 16 * 7, 40 + 16 * 8 - 1])
def test_truncated_data(tmp_path, keep):
    path = make_ring(tmp_path / "r.bin", 8, [(1, 1)], truncate_to=keep)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "Truncated")


def test_huge_capacity_is_truncated_not_crash(tmp_path):
    path = make_ring(tmp_path / "r.bin", 2)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<QQ", raw, 24, 2**63, 2**63 - 1)
    path.write_bytes(bytes(raw))
    with pytest.raises(tr.TelemetryError, match="Truncated"):
        tr.TelemetryRing(path)


@pytest.mark.parametrize("write_pos,read_pos", [(8, 0), (0, 8), (2**64 - 1, 3)])
def test_corrupt_positions(tmp_path, write_pos, read_pos):
    path = make_ring(tmp_path / "r.bin", 8, write_pos=write_pos, read_pos=read_pos)
    before = path.read_bytes()
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "Corrupt")
    assert path.read_bytes() == before


def test_corrupt_position_while_reading(tmp_path):
    path = make_ring(tmp_path / "r.bin", 4, [(1, 1)])
    with tr.TelemetryRing(path) as ring:
        raw = bytearray(path.read_bytes())
        struct.pack_into("<Q", raw, 0, 99)
        with open(path, "r+b") as f:
            f.write(bytes(raw[:8]))
        with pytest.raises(tr.TelemetryError, match="Corrupt"):
            ring.pop()


def test_permission_denied_simulated(tmp_path, monkeypatch, capsys):
    path = make_ring(tmp_path / "r.bin", 4)
    real_open = os.open

    def fake_open(p, flags, *a, **kw):
        if os.fspath(p) == str(path) and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, flags, *a, **kw)

    monkeypatch.setattr(tr.os, "open", fake_open)
    assert tr.main(["--telemetry_path", str(path), "--once"]) == 1
    _out, err = capsys.readouterr()
    assert_single_error_line(err, "Permission denied")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores file permissions")
def test_permission_denied_real(tmp_path):
    path = make_ring(tmp_path / "r.bin", 4)
    os.chmod(path, 0o444)
    res = run_cli("--telemetry_path", path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "Permission denied")


def test_directory_path(tmp_path):
    res = run_cli("--telemetry_path", tmp_path, "--once")
    assert res.returncode == 1
    assert_single_error_line(res.stderr, "Error: ")


# --------------------------------------------------------------------------
# continuous mode and SIGINT


class Running:
    """A reader process in follow mode, with non-blocking output capture."""

    def __init__(self, path):
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--telemetry_path", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.buf = {"stdout": b"", "stderr": b""}
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ, "stdout")
        self.sel.register(self.proc.stderr, selectors.EVENT_READ, "stderr")

    def wait_for(self, stream, text, timeout=20.0):
        deadline = time.monotonic() + timeout
        while text.encode() not in self.buf[stream]:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not self._pump(0):
                raise AssertionError("did not see %r in %s: %r" % (text, stream, self.buf))
            self._pump(min(left, 0.2))

    def _pump(self, timeout):
        got = False
        for key, _ in self.sel.select(timeout):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if chunk:
                self.buf[key.data] += chunk
                got = True
        return got

    def interrupt(self, timeout=20.0):
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=timeout)
        self.sel.close()
        return (self.proc.returncode, (self.buf["stdout"] + out).decode(),
                (self.buf["stderr"] + err).decode())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def test_sigint_on_empty_ring(tmp_path):
    path = make_ring(tmp_path / "r.bin", 16)
    r = Running(path)
    try:
        r.wait_for("stderr", "Event structure size: 16 bytes")
        time.sleep(1.0)
        assert r.proc.poll() is None  # still polling
        rc, out, err = r.interrupt()
    finally:
        r.kill()
    assert rc == 0, err
    assert out == ""
    assert "Press Ctrl+C to stop reading telemetry..." in err
    assert "Received Ctrl+C, shutting down..." in err
    assert "Total events read: 0" in err
    assert "Final buffer size: 0 events" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("version", [4, 5])
def test_follow_mode_reads_new_events(tmp_path, version):
    path = make_ring(tmp_path / "r.bin", 4, [(0, 1)], version=version,
                     expected_version=version, layout=tr.LAYOUTS[version])
    r = Running(path)
    try:
        r.wait_for("stdout", event_block("agent_tx_bytes", 1))
        for i in range(5):  # wraps the 4-slot ring while the reader polls
            push(path, 1, 10 + i)
            r.wait_for("stdout", event_block("agent_rx_bytes", 10 + i))
        rc, out, err = r.interrupt()
    finally:
        r.kill()
    assert rc == 0, err
    assert out == event_block("agent_tx_bytes", 1) + "".join(
        event_block("agent_rx_bytes", 10 + i) for i in range(5))
    assert "Total events read: 6" in err
    assert header_positions(path) == (2, 2)
