"""Fixtures of the ``nixl_telemetry`` tests (their helpers are in ``helpers.py``).

Run them against the installed package: ``pip install ./python``, then
``python -m pytest python/tests`` from the repository root (``bash scripts/test.sh`` does both).

The library reads ``DYN_FPM_*`` once per process, so this process keeps FPM tracing off and every
test that traces runs a child interpreter (``helpers.run_python``) with its own settings. The
caller's ``NIXL_TELEMETRY_*`` and ``DYN_FPM_*`` settings are removed before anything is imported,
so they cannot change a test's outcome (and so is ``NIXL_CONFIG_FILE``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import CRingReader

#: Settings of the tests themselves, not of the library.
_KEPT = {"NIXL_TELEMETRY_FIXTURES", "NIXL_TELEMETRY_LIB_DIR"}
for _name in list(os.environ):
    if _name.startswith(("NIXL_TELEMETRY_", "DYN_FPM_")) and _name not in _KEPT:
        del os.environ[_name]
# The configuration file the caller named, too (a test that needs one names its own).
os.environ.pop("NIXL_CONFIG_FILE", None)

# The tests exercise the installed package: the source tree beside them has no extension module,
# so it must not shadow it (as it would when pytest runs from python/).
_SOURCE_TREE = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _SOURCE_TREE]

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("NIXL_TELEMETRY_FIXTURES") or REPO_ROOT / "tests" / "fixtures")
EXPECTED = FIXTURES / "nixl-rings.expected.json"
#: Our own ring files (the version-5 layout, which NIXL has not merged: no NIXL-written file
#: exists), always from the repository.
OURS = REPO_ROOT / "tests" / "fixtures"
OURS_EXPECTED = OURS / "nixl-telemetry-rings.expected.json"


@pytest.fixture(scope="session")
def nixl_rings() -> dict[str, Any]:
    """The NIXL-written ring fixtures' expected contents (``nixl-rings.expected.json``)."""
    if not EXPECTED.is_file():
        if os.environ.get("NIXL_TELEMETRY_FIXTURES"):
            pytest.fail(f"NIXL_TELEMETRY_FIXTURES={FIXTURES} holds no nixl-rings.expected.json")
        pytest.skip(f"NIXL ring fixtures not found at {FIXTURES}")
    return json.loads(EXPECTED.read_text())


@pytest.fixture(scope="session")
def our_rings() -> dict[str, Any]:
    """Our own ring fixtures' expected contents (``nixl-telemetry-rings.expected.json``)."""
    return json.loads(OURS_EXPECTED.read_text())


@pytest.fixture
def fixture_copy(tmp_path: Path, nixl_rings: dict[str, Any], our_rings: dict[str, Any]):
    """``fixture_copy(name)``: a private copy of a ring fixture, NIXL's or ours (reading moves
    read_pos)."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile((OURS if name in our_rings else FIXTURES) / name, target)
        return target

    return copy


@pytest.fixture
def ring_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Telemetry settings for a ``BUFFER`` ring in ``tmp_path`` flushed only on demand; returns
    the ring directory."""
    monkeypatch.setenv("NIXL_TELEMETRY_DIR", str(tmp_path))
    monkeypatch.setenv("NIXL_TELEMETRY_RUN_INTERVAL", "3600000")
    return tmp_path


@pytest.fixture(scope="session")
def cargo_lib_dir() -> Path:
    """Where cargo built the C library and the plug-ins: ``$NIXL_TELEMETRY_LIB_DIR`` (required
    to hold them when set), else ``target/debug`` or ``target/release`` of this repository."""
    lib_dir = os.environ.get("NIXL_TELEMETRY_LIB_DIR")
    if lib_dir:
        candidates = [Path(lib_dir)]
    else:
        candidates = [REPO_ROOT / "target" / profile for profile in ("debug", "release")]
    for directory in candidates:
        if (directory / "libnixl_telemetry.so").is_file():
            return directory
    if lib_dir:
        pytest.fail(f"NIXL_TELEMETRY_LIB_DIR={lib_dir} holds no libnixl_telemetry.so")
    pytest.skip("libnixl_telemetry.so not built (run cargo build --workspace)")


@pytest.fixture(scope="session")
def c_ring_reader(cargo_lib_dir: Path) -> CRingReader:
    """The C library's ring reader."""
    return CRingReader(cargo_lib_dir / "libnixl_telemetry.so")
