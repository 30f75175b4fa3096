"""The telemetry settings a collector created now would get, and where each came from."""

from __future__ import annotations

from typing import TypedDict

from nixl_telemetry import _native

__all__ = ["SettingValue", "effective_config"]


class SettingValue(TypedDict):
    """One setting's entry in :func:`effective_config`."""

    #: The value as text, or None when the setting is unset (its reader's behaviour applies).
    value: str | None
    #: ``"environment"``, ``"file:<path>"`` (NIXL's configuration file) or ``"default"``.
    origin: str
    #: ``"bool"``, ``"unsigned"``, ``"milliseconds"`` or ``"string"``: what it takes.
    kind: str


def effective_config() -> dict[str, SettingValue]:
    """Every setting the library and its exporter plug-ins read, with the value a collector
    created now would get and its origin, as ``nixl-telemetry config`` prints them.

    Sources, highest first: the environment (an empty ``NIXL_TELEMETRY_*`` variable counts as
    unset), NIXL's configuration file (``$NIXL_CONFIG_FILE``, else ``~/.nixl.cfg``, else
    ``/etc/nixl.cfg``; read once per process), the default.

    Raises :class:`~nixl_telemetry.errors.InvalidArgumentError` when the configuration file
    cannot be read or does not parse, or holds a value of the wrong TOML type for a setting the
    environment leaves unset; the message names the file, the key and the value.
    """
    return _native.effective_config()  # type: ignore[return-value]
