"""The package as shipped: its public names, documentation, type hints, exceptions, and event
names that agree with NIXL's."""

from __future__ import annotations

import dataclasses
import importlib.resources
import importlib.util
import inspect
import pickle
import typing

import pytest

import nixl_telemetry
from helpers import TESTS_DIR
from nixl_telemetry import errors

PUBLIC_CLASSES = [
    getattr(nixl_telemetry, name)
    for name in nixl_telemetry.__all__
    if inspect.isclass(getattr(nixl_telemetry, name))
]


def public_members(cls: type) -> list[tuple[str, object]]:
    """The methods and properties the package defines on ``cls`` (or its package bases) for
    users: public names, and ``__init__`` unless a dataclass generated it."""
    found: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("nixl_telemetry"):
            continue
        for name, member in vars(klass).items():
            wanted = not name.startswith("_") or (
                name == "__init__" and not dataclasses.is_dataclass(klass)
            )
            if wanted and (inspect.isfunction(member) or isinstance(member, property)):
                found[name] = member
    return sorted(found.items())


def test_the_typed_marker_and_version_ship():
    assert (importlib.resources.files("nixl_telemetry") / "py.typed").is_file()
    assert nixl_telemetry.__version__ == "0.1.0"


def test_every_public_name_is_documented():
    assert nixl_telemetry.__doc__
    undocumented = [cls.__name__ for cls in PUBLIC_CLASSES if not inspect.getdoc(cls)]
    for cls in PUBLIC_CLASSES:
        for name, member in public_members(cls):
            if not inspect.getdoc(member):
                undocumented.append(f"{cls.__name__}.{name}")
    assert undocumented == []


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: c.__name__)
def test_public_methods_are_fully_annotated(cls):
    for name, member in public_members(cls):
        function = member.fget if isinstance(member, property) else member
        hints = typing.get_type_hints(function)
        signature = inspect.signature(function)
        missing = [p for p in list(signature.parameters)[1:] if p not in hints]
        assert missing == [], f"{cls.__name__}.{name}: parameters {missing} not annotated"
        assert "return" in hints, f"{cls.__name__}.{name}: no return annotation"


def test_every_exception_derives_from_one_base():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, nixl_telemetry.NixlTelemetryError), name
        assert getattr(nixl_telemetry, name) is cls
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.NotFoundError, FileNotFoundError)
    assert issubclass(errors.NotAllowedError, PermissionError)
    assert issubclass(errors.RingVersionError, errors.RingFormatError)
    assert issubclass(errors.RingTruncatedError, errors.RingFormatError)


@pytest.mark.parametrize("name", errors.__all__)
def test_exceptions_carry_the_message_and_status(name):
    cls = getattr(errors, name)
    raised = cls("what went wrong", -100)
    assert (str(raised), raised.status) == ("what went wrong", -100)
    assert cls("no status").status == cls._default_status
    copy = pickle.loads(pickle.dumps(raised))
    assert (type(copy), str(copy), copy.status) == (cls, "what went wrong", -100)


def test_event_names_agree_with_nixls_and_the_standalone_reader(nixl_rings):
    names = nixl_telemetry.EVENT_NAMES
    assert len(names) == 22 and names[0] == "agent_tx_bytes"
    assert names[20] == "agent_telemetry_events_dropped"
    assert names[21] == "agent_err_xfer_stalled"
    for fixture in nixl_rings.values():
        for event in fixture["events"]:
            assert names[event["type"]] == event["name"]
    script = TESTS_DIR.parents[1] / "examples" / "python" / "telemetry_reader.py"
    spec = importlib.util.spec_from_file_location("standalone_reader", script)
    assert spec and spec.loader
    standalone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standalone)
    assert tuple(standalone.EVENT_NAMES) == names
