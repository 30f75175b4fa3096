#!/usr/bin/env bash
# Installs what the tests need when it is missing, on Debian or Ubuntu (apt-get; as root, or
# through sudo): cmake, g++ and gcc (the C/C++ ABI tests and the DOCA double), pkg-config (the
# install test), Prometheus' promtool and server (the exposition, scrape and remote-write
# tests), Prometheus' node_exporter (the textfile test of `serve --textfile`), openssl (the test
# CA of the push exporters' https tests), tmux (the terminal test of `top`), pytest (the Python
# tests), opentelemetry-proto (the otlp exporter's test receiver; pip), and pandas and duckdb
# (tests/fpm_dataframes.rs runs the FPM page's examples; pip,
# about 30 s once), and the Go-built receivers (Prometheus 3, the OpenTelemetry Collector,
# VictoriaMetrics; see build_go_receivers below). Does nothing when everything is there.
# scripts/test.sh runs it.
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

# The Go-built receivers of the tests: Prometheus 3.16 and its promtool, the OpenTelemetry
# Collector, VictoriaMetrics. Each is built from its module in test-deps/go/ (its go.mod and
# go.sum pin every version; see test-deps/go/README.md) into a cache outside the checkout, one
# binary per name and version (<name>-<version>, the version the go.mod requires, which is how
# test-support/src/receivers/ finds it), reused while <name>-<version>.stamp holds the checksum
# of its module's files (go.mod, go.sum, *.go): a version bump or an edit builds again. Without a Go recent enough this says what to install and goes on: the
# tests that need these servers then fail saying the same, unless
# NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1 (never set by CI).
build_go_receivers() {
  local root bin go need have
  root="$(cd "$(dirname "$0")/.." && pwd)/test-deps/go"
  bin="${XDG_CACHE_HOME:-$HOME/.cache}/nixl-telemetry/go-bin"
  # The receivers wanted: <module dir> <module whose version keys the binaries> then
  # <binary name>=<package> pairs.
  local receivers=(
    "prometheus github.com/prometheus/prometheus prometheus=github.com/prometheus/prometheus/cmd/prometheus promtool=github.com/prometheus/prometheus/cmd/promtool"
    "otelcol github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusremotewriteexporter otelcol=."
    "victoria-metrics github.com/VictoriaMetrics/VictoriaMetrics victoria-metrics=github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics"
  )
  local todo=() line dir module pairs version pair sum
  for line in "${receivers[@]}"; do
    read -r dir module pairs <<<"$line"
    version="$(awk -v m="$module" '$1 == m { print $2 }' "$root/$dir/go.mod")"
    sum="$(cd "$root/$dir" && shopt -s nullglob && cat go.mod go.sum ./*.go | sha256sum | cut -c1-64)"
    for pair in $pairs; do
      [ -x "$bin/${pair%%=*}-$version" ] &&
        [ "$(cat "$bin/${pair%%=*}-$version.stamp" 2>/dev/null)" = "$sum" ] ||
        todo+=("$dir $version $sum $pair")
    done
  done
  ((${#todo[@]})) || return 0
  # The newest `go` line of the modules is the oldest Go that builds them all.
  need="$(awk '$1 == "go" { print $2 }' "$root"/*/go.mod | sort -V | tail -1)"
  go="$(command -v go || true)"
  [ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
  have="$([ -z "$go" ] || GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null | sed 's/^go//')"
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "install-test-deps.sh: the Prometheus 3, OpenTelemetry Collector and VictoriaMetrics" \
      "tests need Go $need or newer (found: ${have:-none}): install it from" \
      "https://go.dev/dl/ (or set NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1 to skip those tests)" >&2
    return 0
  fi
  mkdir -p "$bin"
  local name pkg out start
  for line in "${todo[@]}"; do
    read -r dir version sum pair <<<"$line"
    name="${pair%%=*}" pkg="${pair#*=}" out="$bin/$name-$version"
    echo "== building $name $version (go build, test-deps/go/$dir)"
    start=$SECONDS
    # -mod=readonly: exactly the committed go.mod and go.sum. No cgo: no C compiler needed.
    # The Go caches are Go's own (GOMODCACHE, GOCACHE); nice: the build takes every core.
    (cd "$root/$dir" && CGO_ENABLED=0 GOTOOLCHAIN=local nice -n 10 "$go" build -mod=readonly \
      -buildvcs=false -trimpath -o "$out.partial" "$pkg")
    mv "$out.partial" "$out"
    echo "$sum" >"$out.stamp"
    echo "   $out ($((SECONDS - start)) s)"
  done
}
if [ "${NIXL_TELEMETRY_SKIP_GO_RECEIVERS:-}" = 1 ]; then
  echo "== NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1: not building Prometheus 3, the Collector, VictoriaMetrics"
else
  build_go_receivers
fi
