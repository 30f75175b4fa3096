"""Helpers of the ``nixl_telemetry`` tests, shared by the test modules and the child
interpreters that :func:`run_python` starts (they import this module too)."""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent

#: Ring header layout (version 4): write_pos, read_pos, version, expected_version, capacity,
#: mask; native endian.
HEADER = struct.Struct("=QQiiQQ")

#: Where version 5 (NIXL's open pull request #2018, a 512-byte header) keeps its words:
#: write_pos @0, capacity @8, version @16, expected_version @20, mask @24, read_pos @256.
HEADER_V5_SIZE = 512


def ring_header(path: Path) -> dict[str, int]:
    """The header fields of the ring file at ``path``, of either layout."""
    data = path.read_bytes()
    (version,) = struct.unpack_from("=i", data, 16)
    if version == 5:
        write_pos, capacity, version, expected, mask = struct.unpack_from("=QQiiQ", data, 0)
        (read_pos,) = struct.unpack_from("=Q", data, 256)
        values = (write_pos, read_pos, version, expected, capacity, mask)
    else:
        values = HEADER.unpack(data[: HEADER.size])
    names = ("write_pos", "read_pos", "version", "expected_version", "capacity", "mask")
    return dict(zip(names, values))


class CRingReader:
    """The C library's ring reader (``nixl_telemetry_ring_*`` of ``libnixl_telemetry.so``)."""

    class _Event(ctypes.Structure):
        _fields_ = [("event_type", ctypes.c_uint32), ("value", ctypes.c_uint64)]

    SUCCESS = 0
    EMPTY = 1

    def __init__(self, library: Path) -> None:
        lib = ctypes.CDLL(str(library))
        lib.nixl_telemetry_ring_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.nixl_telemetry_ring_open.restype = ctypes.c_int32
        lib.nixl_telemetry_ring_pop.argtypes = [ctypes.c_void_p, ctypes.POINTER(self._Event)]
        lib.nixl_telemetry_ring_pop.restype = ctypes.c_int32
        lib.nixl_telemetry_ring_close.argtypes = [ctypes.c_void_p]
        lib.nixl_telemetry_ring_close.restype = None
        self._lib = lib

    def drain(self, path: Path) -> list[tuple[int, int]]:
        """Every pending event of the ring at ``path``, as ``(type, value)``."""
        ring = ctypes.c_void_p()
        status = self._lib.nixl_telemetry_ring_open(os.fsencode(path), ctypes.byref(ring))
        assert status == self.SUCCESS, f"nixl_telemetry_ring_open: status {status}"
        events = []
        event = self._Event()
        try:
            while (status := self._lib.nixl_telemetry_ring_pop(ring, ctypes.byref(event))) == 0:
                events.append((event.event_type, event.value))
            assert status == self.EMPTY, f"nixl_telemetry_ring_pop: status {status}"
        finally:
            self._lib.nixl_telemetry_ring_close(ring)
        return events


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Runs ``code`` in a child interpreter with these extra environment variables; it must
    exit 0 and print one JSON value as its last line of output, which is returned. The child
    can ``import helpers``."""
    child_env = dict(os.environ, **(env or {}))
    prelude = f"import sys\nsys.path.insert(0, {str(TESTS_DIR)!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=child_env,
        # Not the source tree, which would shadow the installed package.
        cwd=TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"child exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"child printed nothing; stderr:\n{done.stderr}"
    return json.loads(lines[-1])


def trace_rows(prefix: str | Path) -> list[dict[str, Any]]:
    """Every row of the FPM segments of producer prefix ``prefix``, in index order."""
    prefix = Path(prefix)
    segments = sorted(prefix.parent.glob(prefix.name + ".*.jsonl.gz"))
    rows = []
    for segment in segments:
        with gzip.open(segment, "rt") as lines:
            rows.extend(json.loads(line) for line in lines)
    return rows


def payload(counter_id: int = 0, worker_id: str = "4192", **extra: Any) -> dict[str, Any]:
    """A valid ``ForwardPassMetrics`` payload as a dict."""
    fpm: dict[str, Any] = {
        "version": 1,
        "worker_id": worker_id,
        "dp_rank": 0,
        "counter_id": counter_id,
        "wall_time": 0.025,
        "scheduled_requests": {
            "num_prefill_requests": 2,
            "sum_prefill_tokens": 256,
            "var_prefill_length": 0.5,
            "sum_prefill_kv_tokens": 64,
            "num_decode_requests": 3,
            "sum_decode_kv_tokens": 1024,
            "var_decode_kv_tokens": 0.0,
        },
        "queued_requests": {
            "num_prefill_requests": 1,
            "sum_prefill_tokens": 128,
            "var_prefill_length": 0.0,
            "num_decode_requests": 0,
            "sum_decode_kv_tokens": 0,
            "var_decode_kv_tokens": 0.0,
        },
    }
    fpm.update(extra)
    return fpm


def msgpack(value: Any) -> bytes:
    """A minimal msgpack encoder (maps with str keys, str, int, float, bool, None), written
    independently of the package, for the tests' msgpack payloads."""
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 2**64:
            return b"\xcf" + struct.pack(">Q", value)
        return b"\xd3" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode()
        return b"\xdb" + struct.pack(">I", len(data)) + data
    if isinstance(value, dict):
        out = b"\xdf" + struct.pack(">I", len(value))
        for key, item in value.items():
            out += msgpack(key) + msgpack(item)
        return out
    raise TypeError(f"cannot encode {type(value).__name__}")


def fpm_env(tmp_path: Path, mode: str = "full", **extra: str) -> dict[str, str]:
    """``DYN_FPM_*`` settings for a trace written under ``tmp_path``."""
    env = {"DYN_FPM_TRACE": "1", "DYN_FPM_MODE": mode, "DYN_FPM_OUTPUT_PATH": str(tmp_path / "fpm")}
    env.update(extra)
    return env
