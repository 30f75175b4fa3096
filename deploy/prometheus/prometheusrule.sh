#!/usr/bin/env bash
# Writes nixl-telemetry.prometheusrule.yml (or the file given), the Prometheus Operator's
# PrometheusRule holding nixl-telemetry.rules.yml unchanged (its groups under `spec:`). Run it
# after editing the rules; plugins/prometheus/tests/monitoring_rules.rs fails while the two
# differ.
set -euo pipefail
here="$(dirname "$0")"
out="${1:-$here/nixl-telemetry.prometheusrule.yml}"
{
  cat <<'HEAD'
# Generated from nixl-telemetry.rules.yml by prometheusrule.sh: edit the rules there, then run
# the script. `kubectl apply -f` this file in the namespace your Prometheus reads rules from.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: nixl-telemetry
  labels:
    release: prometheus          # whatever label your Prometheus selects rules by (ruleSelector)
spec:
HEAD
  # Every line indented by two spaces; empty lines stay empty.
  sed -e 's/^\(.\)/  \1/' "$here/nixl-telemetry.rules.yml"
} >"$out"
