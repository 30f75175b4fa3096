#!/usr/bin/env bash
# Installs nixl-telemetry under a prefix:
#   lib/libnixl_telemetry.so (SONAME libnixl_telemetry.so), lib/libnixl_telemetry.a,
#   lib/plugins/libtelemetry_exporter_*.so, include/*.h *.hpp,
#   lib/cmake/nixl_telemetry/ (find_package config + version), lib/pkgconfig/nixl_telemetry.pc
#
# usage: scripts/install.sh [--prefix DIR] [--release] [--from TARGET_PROFILE_DIR] [--no-build]
#   --prefix   where to install (default /usr/local)
#   --debug    build and install the debug profile (default: release)
#   --from     install what cargo already built in this directory (implies --no-build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
profile=release
from=""
build=1
while (($#)); do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --release) profile=release; shift ;;
    --debug) profile=debug; shift ;;
    --from) from="$2"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$from" ]; then
  from="${CARGO_TARGET_DIR:-$root/target}/$profile"
fi
if ((build)); then
  if [ "$profile" = release ]; then
    (cd "$root" && cargo build --workspace --release)
  else
    (cd "$root" && cargo build --workspace)
  fi
fi
for f in libnixl_telemetry.so libnixl_telemetry.a; do
  [ -f "$from/$f" ] || { echo "install.sh: $from/$f does not exist: build first" >&2; exit 1; }
done

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")"
mkdir -p "$prefix/lib/plugins" "$prefix/include" "$prefix/lib/cmake/nixl_telemetry" \
         "$prefix/lib/pkgconfig"
prefix="$(cd "$prefix" && pwd)"

install -m 0755 "$from/libnixl_telemetry.so" "$prefix/lib/"
install -m 0644 "$from/libnixl_telemetry.a" "$prefix/lib/"
shopt -s nullglob
for plugin in "$from"/libtelemetry_exporter_*.so; do
  install -m 0755 "$plugin" "$prefix/lib/plugins/"
done
install -m 0644 "$root"/include/*.h "$root"/include/*.hpp "$prefix/include/"
sed "s|@VERSION@|$version|g" "$root/cmake/nixl_telemetryConfig.cmake.in" \
  > "$prefix/lib/cmake/nixl_telemetry/nixl_telemetryConfig.cmake"
sed "s|@VERSION@|$version|g" "$root/cmake/nixl_telemetryConfigVersion.cmake.in" \
  > "$prefix/lib/cmake/nixl_telemetry/nixl_telemetryConfigVersion.cmake"
sed -e "s|@VERSION@|$version|g" -e "s|@PREFIX@|$prefix|g" "$root/cmake/nixl_telemetry.pc.in" \
  > "$prefix/lib/pkgconfig/nixl_telemetry.pc"
echo "installed nixl-telemetry $version into $prefix"
