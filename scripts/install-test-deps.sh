#!/usr/bin/env bash
# Installs what the tests need when it is missing, on Debian or Ubuntu (apt-get; as root, or
# through sudo): cmake, g++ and gcc (the C/C++ ABI tests and the DOCA double), pkg-config (the
# install test), Prometheus' promtool and server (the exposition, scrape and remote-write
# tests), Prometheus' node_exporter (the textfile test of `serve --textfile`), openssl (the test
# CA of the push exporters' https tests), tmux (the terminal test of `top`), pytest (the Python
# tests), opentelemetry-proto (the otlp exporter's test receiver; pip), and pandas and duckdb
# (tests/fpm_dataframes.rs runs the FPM page's examples; pip,
# about 30 s once). Does nothing when everything is there. scripts/test.sh runs it.
set -euo pipefail

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v cc >/dev/null || missing+=(gcc)
command -v pkg-config >/dev/null || missing+=(pkg-config)
# Debian's `prometheus` package provides both promtool and the server.
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || missing+=(prometheus)
command -v prometheus-node-exporter >/dev/null || missing+=(prometheus-node-exporter)
command -v tmux >/dev/null || missing+=(tmux)
# openssl makes the CA and certificate of the push exporters' https tests.
command -v openssl >/dev/null || missing+=(openssl)
command -v python3 >/dev/null || missing+=(python3)
if command -v python3 >/dev/null && ! python3 -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip)
fi

apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v apt-get >/dev/null; then
    echo "install-test-deps.sh: missing $*, and no apt-get to install it: install it by hand" >&2
    exit 1
  fi
  echo "== installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # No recommended packages (Debian's prometheus would pull in node-exporter, which is listed
  # on its own when the tests need it).
  $sudo apt-get install -y -qq --no-install-recommends "$@"
}

if ((${#missing[@]})); then
  apt_install "${missing[@]}"
fi
if ! python3 -m pytest --version >/dev/null 2>&1; then
  echo "== installing pytest"
  # A Python whose packages apt manages refuses pip (PEP 668): take Debian's pytest then.
  python3 -m pip install -q pytest 2>/dev/null || apt_install python3-pytest
fi
if ! python3 -c 'from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2' \
  >/dev/null 2>&1; then
  echo "== installing opentelemetry-proto (pip)"
  # The otlp exporter's test decodes requests with the official protobuf definitions.
  python3 -m pip install -q opentelemetry-proto 2>/dev/null ||
    python3 -m pip install -q --break-system-packages opentelemetry-proto
fi
if ! python3 -c 'import pandas, duckdb' >/dev/null 2>&1; then
  echo "== installing pandas and duckdb (pip)"
  # PEP 668 (a Python whose packages apt manages) refuses a plain pip install; Debian has no
  # duckdb package, so install both with pip anyway, beside apt's packages.
  python3 -m pip install -q pandas duckdb 2>/dev/null ||
    python3 -m pip install -q --break-system-packages pandas duckdb
fi
