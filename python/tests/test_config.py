"""``effective_config()``: each setting's value and origin, with NIXL's configuration file under
a temporary ``HOME`` (read once per process, so each case runs in a child interpreter)."""

from __future__ import annotations

from pathlib import Path

from helpers import run_python

import nixl_telemetry


def test_effective_config_in_this_process_lists_every_setting():
    config = nixl_telemetry.effective_config()
    assert config["NIXL_TELEMETRY_BUFFER_SIZE"]["kind"] == "unsigned"
    assert config["NIXL_TELEMETRY_ENABLE"]["kind"] == "bool"
    assert config["NIXL_TELEMETRY_RUN_INTERVAL"]["kind"] == "milliseconds"
    assert config["NIXL_PLUGIN_DIR"]["kind"] == "string"
    assert "NIXL_TELEMETRY_MULTIPROC_DIR" in config
    assert all(set(entry) == {"value", "origin", "kind"} for entry in config.values())


def test_values_come_from_the_environment_then_the_file(tmp_path: Path):
    rings = tmp_path / "rings"
    rings.mkdir()
    cfg = tmp_path / ".nixl.cfg"
    cfg.write_text(
        f"NIXL_TELEMETRY_ENABLE = true\nNIXL_TELEMETRY_DIR = '{rings}'\n"
        "NIXL_TELEMETRY_BUFFER_SIZE = 64\nNIXL_TELEMETRY_RUN_INTERVAL = 00:00:00.250\n"
    )
    code = """
        import json
        import nixl_telemetry
        telemetry = nixl_telemetry.Telemetry("from-file", capture=False)
        exporter = telemetry.exporter
        telemetry.close()
        print(json.dumps({"config": nixl_telemetry.effective_config(), "exporter": exporter}))
    """
    env = {"HOME": str(tmp_path), "NIXL_TELEMETRY_BUFFER_SIZE": "32"}
    result = run_python(code, env)
    config = result["config"]
    assert result["exporter"] == "BUFFER"
    assert (rings / "from-file").is_file()
    origin = f"file:{cfg}"
    assert config["NIXL_TELEMETRY_DIR"] == {"value": str(rings), "origin": origin, "kind": "string"}
    assert config["NIXL_TELEMETRY_RUN_INTERVAL"]["value"] == "250"
    assert config["NIXL_TELEMETRY_BUFFER_SIZE"] == {
        "value": "32",
        "origin": "environment",
        "kind": "unsigned",
    }
    assert config["NIXL_TELEMETRY_EXPORTER"] == {"value": None, "origin": "default", "kind": "string"}
    assert config["NIXL_TELEMETRY_PROMETHEUS_PORT"]["value"] == "9090"


def test_a_wrong_type_raises_naming_the_file_the_key_and_the_value(tmp_path: Path):
    cfg = tmp_path / "nixl.cfg"
    cfg.write_text("NIXL_TELEMETRY_BUFFER_SIZE = -8\n")
    code = """
        import json
        import nixl_telemetry
        try:
            nixl_telemetry.effective_config()
        except nixl_telemetry.InvalidArgumentError as e:
            print(json.dumps(str(e)))
    """
    message = run_python(code, {"HOME": str(tmp_path), "NIXL_CONFIG_FILE": str(cfg)})
    assert message == f"{cfg}: NIXL_TELEMETRY_BUFFER_SIZE = -8 is negative: write an unsigned integer"
