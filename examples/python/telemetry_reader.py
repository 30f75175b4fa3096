#!/usr/bin/env python3
"""NIXL telemetry ring reader (drop-in replacement for NIXL's Python reader).

Reads the shared-memory ring file written by NIXL's BUFFER telemetry
exporter (TELEMETRY_VERSION 4, little-endian x86-64 layout), or of the
version 5 of NIXL's open pull request #2018, and prints each event as it is
consumed.

Usage::

    python3 telemetry_reader.py --telemetry_path PATH [--once]

Options:
    --telemetry_path PATH  ring file to read (required).
    --once                 drain the events currently in the ring, print the
                           totals and exit 0 instead of polling forever
                           (meant for tests and scripts).

Output:
    * Each event is printed to stdout as a block (stdout is flushed after
      every event so it can be piped)::

          <empty line>
          === NIXL Telemetry Event ===
          Event: <name>
          Value: <value>
          ===========================

    * Status lines go through ``logging`` (INFO) to stderr.
    * Errors (missing file, bad header, truncated or corrupt ring, permission
      denied) are logged as a single ``Error: ...`` line on stderr and the
      exit status is 1; no traceback is shown and the file is never modified.

Without ``--once`` the reader polls every 0.5 s when the ring is empty and
stops on SIGINT (Ctrl+C), printing the totals and exiting 0.

Ring file layouts (all little-endian), told apart by ``version`` at @16:
    version 4 (NIXL's), header of 40 bytes:
        @0  u64 write_pos     @8  u64 read_pos
        @16 i32 version       @20 i32 expected_version
        @24 u64 capacity      @32 u64 mask
    version 5 (NIXL's open pull request #2018), header of 512 bytes:
        @0  u64 write_pos     @8  u64 capacity
        @16 i32 version       @20 i32 expected_version
        @24 u64 mask          @256 u64 read_pos  (the rest is zero)
    then ``capacity`` records of 16 bytes:
        @0 u32 event_type, @4 4 padding bytes (ignored), @8 u64 value

``capacity`` is a power of two and ``mask == capacity - 1``; positions are
stored masked.  The ring is empty iff ``read_pos == write_pos``.  Reading
advances ``read_pos`` inside the file, so the file is opened read-write.

The ring logic is importable: :class:`TelemetryRing`, :func:`event_name`,
and :func:`main` (which returns the exit code).
"""

import argparse
import collections
import logging
import mmap
import os
import signal
import struct
import sys
import time

#: Where one layout version keeps its header words; records start at ``header_size``.
Layout = collections.namedtuple(
    "Layout", "version header_size read_pos_off capacity_off mask_off"
)

#: The layouts this reader reads, by their version word: NIXL's (4), and the
#: 512-byte header of NIXL's open pull request #2018 (5).
LAYOUTS = {
    4: Layout(version=4, header_size=40, read_pos_off=8, capacity_off=24, mask_off=32),
    5: Layout(version=5, header_size=512, read_pos_off=256, capacity_off=8, mask_off=24),
}

#: The layout NIXL writes.
TELEMETRY_VERSION = 4

#: The smallest header (version 4's): a shorter file is no ring.
MIN_HEADER_SIZE = min(layout.header_size for layout in LAYOUTS.values())
EVENT_SIZE = 16

_EVENT = struct.Struct("<I4xQ")  # type, 4 ignored padding bytes, value
_POS = struct.Struct("<Q")
_VERSION = struct.Struct("<i")

_WRITE_POS_OFF = 0
_VERSION_OFF = 16

assert _EVENT.size == EVENT_SIZE

POLL_INTERVAL = 0.5

EVENT_NAMES = (
    "agent_tx_bytes",
    "agent_rx_bytes",
    "agent_tx_requests_num",
    "agent_rx_requests_num",
    "agent_memory_registered",
    "agent_memory_deregistered",
    "agent_xfer_time",
    "agent_xfer_post_time",
    "agent_err_not_posted",
    "agent_err_invalid_param",
    "agent_err_backend",
    "agent_err_not_found",
    "agent_err_mismatch",
    "agent_err_not_allowed",
    "agent_err_repost_active",
    "agent_err_unknown",
    "agent_err_not_supported",
    "agent_err_remote_disconnect",
    "agent_err_canceled",
    "agent_err_no_telemetry",
    "agent_telemetry_events_dropped",
    "agent_err_xfer_stalled",
)

LOGGER_NAME = "nixl_telemetry_reader"
logger = logging.getLogger(LOGGER_NAME)


def event_name(event_type):
    """Return the NIXL name of a numeric event type."""
    if 0 <= event_type < len(EVENT_NAMES):
        return EVENT_NAMES[event_type]
    return "unknown_event_%d" % event_type


class TelemetryError(Exception):
    """The ring file cannot be opened or is not a valid ring of a known layout."""


class TelemetryRing:
    """Consumer side of a NIXL telemetry ring file, of either layout.

    The header is validated before any index is trusted; the file itself is
    never written except for ``read_pos`` (8 bytes at offset 8, or 256 in
    version 5) by :meth:`pop`.  Positions are read from the file at every call
    (nothing is cached), so opening a ring in use starts at its ``read_pos``.
    Raises :class:`TelemetryError` on any problem.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fd = -1
        self._map = None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self):
        path = self.path
        try:
            self._fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise TelemetryError("Telemetry file %s does not exist" % path) from None
        except PermissionError:
            raise TelemetryError(
                "Permission denied opening %s read-write "
                "(the reader must advance read_pos)" % path
            ) from None
        except OSError as exc:
            raise TelemetryError(
                "Cannot open %s read-write: %s" % (path, exc.strerror or exc)
            ) from None

        try:
            file_size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise TelemetryError("Cannot stat %s: %s" % (path, exc.strerror)) from None
        if file_size < MIN_HEADER_SIZE:
            raise TelemetryError(
                "File %s is too small for a telemetry header: %d bytes, need at least %d"
                % (path, file_size, MIN_HEADER_SIZE)
            )

        raw = self._pread(MIN_HEADER_SIZE)
        version = _VERSION.unpack_from(raw, _VERSION_OFF)[0]
        layout = LAYOUTS.get(version)
        if layout is None:
            raise TelemetryError(
                "Version mismatch: expected %s, got %d"
                % (" or ".join(str(v) for v in sorted(LAYOUTS)), version)
            )
        if file_size < layout.header_size:
            raise TelemetryError(
                "File %s is too small for a version-%d telemetry header: %d bytes, "
                "need at least %d" % (path, version, file_size, layout.header_size)
            )
        raw = self._pread(layout.header_size)
        write_pos = _POS.unpack_from(raw, _WRITE_POS_OFF)[0]
        read_pos = _POS.unpack_from(raw, layout.read_pos_off)[0]
        capacity = _POS.unpack_from(raw, layout.capacity_off)[0]
        mask = _POS.unpack_from(raw, layout.mask_off)[0]

        if capacity == 0 or capacity & (capacity - 1):
            raise TelemetryError(
                "Invalid buffer capacity %d in %s: must be a non-zero power of two"
                % (capacity, path)
            )
        if mask != capacity - 1:
            raise TelemetryError(
                "Invalid buffer mask %d in %s: expected %d for capacity %d"
                % (mask, path, capacity - 1, capacity)
            )
        needed = layout.header_size + EVENT_SIZE * capacity
        if file_size < needed:
            raise TelemetryError(
                "Truncated telemetry file %s: %d bytes, capacity %d needs %d"
                % (path, file_size, capacity, needed)
            )
        self._check_positions(write_pos, read_pos, capacity)

        try:
            self._map = mmap.mmap(
                self._fd, needed, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except (OSError, ValueError) as exc:
            raise TelemetryError("Cannot map %s: %s" % (path, exc)) from None

        self.layout = layout
        self.version = version
        self.capacity = capacity
        self.mask = mask
        self.file_size = file_size

    def _pread(self, size):
        """The first ``size`` bytes of the file (the caller checked its size)."""
        try:
            raw = os.pread(self._fd, size, 0)
        except OSError as exc:
            raise TelemetryError("Cannot read %s: %s" % (self.path, exc.strerror)) from None
        if len(raw) < size:
            raise TelemetryError("Short read of the telemetry header in %s" % self.path)
        return raw

    def _check_positions(self, write_pos, read_pos, capacity):
        if write_pos >= capacity or read_pos >= capacity:
            raise TelemetryError(
                "Corrupt telemetry file %s: read_pos %d / write_pos %d out of range "
                "for capacity %d" % (self.path, read_pos, write_pos, capacity)
            )

    def _positions(self):
        if self._map is None:
            raise TelemetryError("Telemetry ring %s is closed" % self.path)
        write_pos = _POS.unpack_from(self._map, _WRITE_POS_OFF)[0]
        read_pos = _POS.unpack_from(self._map, self.layout.read_pos_off)[0]
        self._check_positions(write_pos, read_pos, self.capacity)
        return write_pos, read_pos

    def size(self):
        """Number of unread events currently in the ring."""
        write_pos, read_pos = self._positions()
        return (write_pos - read_pos) & self.mask

    def empty(self):
        return self.size() == 0

    def pop(self):
        """Consume one event: return ``(event_type, value)`` or ``None``."""
        write_pos, read_pos = self._positions()
        if read_pos == write_pos:
            return None
        event_type, value = _EVENT.unpack_from(
            self._map, self.layout.header_size + read_pos * EVENT_SIZE
        )
        _POS.pack_into(self._map, self.layout.read_pos_off, (read_pos + 1) & self.mask)
        return event_type, value

    def close(self):
        if self._map is not None:
            try:
                self._map.close()
            finally:
                self._map = None
        if self._fd >= 0:
            try:
                os.close(self._fd)
            finally:
                self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def format_event(event_type, value):
    """The stdout block for one event (without the trailing newline)."""
    return "\n=== NIXL Telemetry Event ===\nEvent: %s\nValue: %d\n%s" % (
        event_name(event_type),
        value,
        "=" * 27,
    )


def _setup_logging():
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s - %(levelname)s - %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
        )
    )
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _parse_args(argv):
    parser = argparse.ArgumentParser(description="NIXL Telemetry Reader")
    parser.add_argument(
        "--telemetry_path", required=True, help="Path to the telemetry ring file"
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="Drain the events currently in the ring, print totals and exit",
    )
    return parser.parse_args(argv)


def main(argv=None):
    """Run the reader; return the process exit code."""
    args = _parse_args(argv)
    _setup_logging()
    path = args.telemetry_path

    # Install the SIGINT handler first so Ctrl+C never produces a traceback.
    stop = {"flag": False}

    def _on_sigint(signum, frame):
        stop["flag"] = True

    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not in the main thread (e.g. imported and threaded)
        previous = None

    ring = None
    try:
        logger.info("Telemetry path: %s", path)
        if not os.path.exists(path):
            logger.error("Telemetry file %s does not exist", path)
            return 1

        logger.info("Opening telemetry buffer: %s", path)
        if not args.once:
            logger.info("Press Ctrl+C to stop reading telemetry...")

        ring = TelemetryRing(path)
        logger.info("Auto-detected buffer size: %d", ring.capacity)
        logger.info("Successfully opened telemetry buffer (version: %d)", ring.version)
        logger.info("Buffer capacity: %d events", ring.capacity)
        logger.info("Current events in buffer: %d", ring.size())
        logger.info("Event structure size: %d bytes", EVENT_SIZE)

        total = 0
        while not stop["flag"]:
            event = ring.pop()
            if event is None:
                if args.once:
                    break
                time.sleep(POLL_INTERVAL)
                continue
            print(format_event(*event), flush=True)
            total += 1
        if stop["flag"]:
            logger.info("Received Ctrl+C, shutting down...")

        logger.info("Total events read: %d", total)
        logger.info("Final buffer size: %d events", ring.size())
        return 0
    except TelemetryError as exc:
        logger.error("Error: %s", exc)
        return 1
    except KeyboardInterrupt:  # only if our handler could not be installed
        logger.info("Received Ctrl+C, shutting down...")
        return 0
    except BrokenPipeError:
        # The stdout consumer went away: stop quietly, and keep the
        # interpreter's final flush from complaining.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if ring is not None:
            ring.close()


if __name__ == "__main__":
    sys.exit(main())
