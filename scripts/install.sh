#!/usr/bin/env bash
# Installs nixl-telemetry under a prefix.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/install.sh [--prefix DIR] [--release | --debug] [--from DIR] [--no-build]
                          [--strip | --no-strip]

Builds the workspace (release profile by default) and installs under the prefix:
  bin/nixl-telemetry                      the command-line reader (read, stats, top, demo, fpm)
  lib/libnixl_telemetry.so.VERSION        the shared library (SONAME libnixl_telemetry.so.0),
  lib/libnixl_telemetry.so.0 -> ...       with the usual links
  lib/libnixl_telemetry.so   -> ...so.0
  lib/libnixl_telemetry.a                 the static library
  lib/plugins/libtelemetry_exporter_*.so  the exporter plug-ins (not the example plug-in)
  lib/plugins/libnixl_telemetry_cpp_bridge.so  loads NIXL's own C++ plug-ins
  lib/plugins/nixl/libtelemetry_exporter_*.so  the same exporters for NIXL's plug-in manager
  include/                                C and C++ headers
  include/nixl_dropin/                    NIXL's telemetry.h and telemetry_event.h, for NIXL builds
  lib/cmake/nixl_telemetry/               find_package(nixl_telemetry CONFIG) files
  lib/pkgconfig/nixl_telemetry.pc         pkg-config file

options:
  --prefix DIR  where to install (default /usr/local)
  --release     build and install the release profile (the default)
  --debug       build and install the debug profile (implies --no-strip)
  --from DIR    install what cargo already built in DIR, e.g. target/release (implies --no-build)
  --no-build    do not run cargo build first
  --strip       strip debug information and local symbols (the default, except with --debug);
                the exported C functions and the plug-in entry points are kept
  --no-strip    install the files as cargo built them
  -h, --help    print this help
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
profile=release
from=""
build=1
strip=""
while (($#)); do
  case "$1" in
    --prefix)
      [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }
      prefix="$2"; shift 2 ;;
    --release) profile=release; shift ;;
    --debug) profile=debug; shift ;;
    --from)
      [ $# -ge 2 ] || { echo "install.sh: --from needs a directory" >&2; exit 2; }
      from="$2"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    --strip) strip=1; shift ;;
    --no-strip) strip=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$strip" ]; then
  if [ "$profile" = debug ]; then strip=0; else strip=1; fi
fi

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
for f in libnixl_telemetry.so libnixl_telemetry.a nixl-telemetry libnixl_telemetry_cpp_bridge.so \
         libnixl_telemetry_nixl_adapter.so; do
  [ -f "$from/$f" ] || {
    echo "install.sh: $from/$f does not exist: build first (cargo build --workspace)" >&2
    exit 1
  }
done
if ((strip)) && ! command -v strip >/dev/null; then
  echo "install.sh: warning: 'strip' not found (binutils): installing unstripped files" >&2
  strip=0
fi

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")"
mkdir -p "$prefix/bin" "$prefix/lib/plugins" "$prefix/include" \
         "$prefix/lib/cmake/nixl_telemetry" "$prefix/lib/pkgconfig"
prefix="$(cd "$prefix" && pwd)"

# install_file MODE SOURCE DEST [strip option]: copies, then strips the copy.
install_file() {
  install -m "$1" "$2" "$3"
  if ((strip)) && [ $# -ge 4 ]; then
    local dest="$3"
    [ -d "$dest" ] && dest="$dest/$(basename "$2")"
    strip "$4" "$dest"
  fi
}

shared="libnixl_telemetry.so.$version"
install_file 0755 "$from/libnixl_telemetry.so" "$prefix/lib/$shared" --strip-unneeded
ln -sfn "$shared" "$prefix/lib/libnixl_telemetry.so.0"
ln -sfn libnixl_telemetry.so.0 "$prefix/lib/libnixl_telemetry.so"
install_file 0644 "$from/libnixl_telemetry.a" "$prefix/lib/" --strip-debug
install_file 0755 "$from/nixl-telemetry" "$prefix/bin/" --strip-unneeded
shopt -s nullglob
# Plug-in directories are 0755 whatever the umask: the loader refuses group- or other-writable ones.
install -d -m 0755 "$prefix/lib/plugins" "$prefix/lib/plugins/nixl"
for plugin in "$from"/libtelemetry_exporter_*.so; do
  # The example plug-in is a template for plug-in authors, not an exporter to deploy.
  case "$(basename "$plugin")" in libtelemetry_exporter_example_rust.so) continue ;; esac
  install_file 0755 "$plugin" "$prefix/lib/plugins/" --strip-unneeded
  # The same exporter for NIXL's own plug-in manager: the adapter, named as the plug-in. Copies,
  # never links: the dynamic loader takes two names of one file for one library.
  install_file 0755 "$from/libnixl_telemetry_nixl_adapter.so" \
    "$prefix/lib/plugins/nixl/$(basename "$plugin")" --strip-unneeded
done
# The bridge through which the library loads NIXL's own C++ plug-ins (plug-in API version 2).
install_file 0755 "$from/libnixl_telemetry_cpp_bridge.so" "$prefix/lib/plugins/" --strip-unneeded
install -m 0644 "$root"/include/*.h "$root"/include/*.hpp "$prefix/include/"
# Drop-ins for NIXL's internal telemetry.h and telemetry_event.h (for a NIXL build without its
# telemetry core: put include/nixl_dropin on its include path).
install -d -m 0755 "$prefix/include/nixl_dropin"
install -m 0644 "$root"/include/nixl_dropin/*.h "$prefix/include/nixl_dropin/"
sed "s|@VERSION@|$version|g" "$root/cmake/nixl_telemetryConfig.cmake.in" \
  > "$prefix/lib/cmake/nixl_telemetry/nixl_telemetryConfig.cmake"
sed "s|@VERSION@|$version|g" "$root/cmake/nixl_telemetryConfigVersion.cmake.in" \
  > "$prefix/lib/cmake/nixl_telemetry/nixl_telemetryConfigVersion.cmake"
sed -e "s|@VERSION@|$version|g" -e "s|@PREFIX@|$prefix|g" "$root/cmake/nixl_telemetry.pc.in" \
  > "$prefix/lib/pkgconfig/nixl_telemetry.pc"
echo "installed nixl-telemetry $version into $prefix (add $prefix/bin to PATH for nixl-telemetry)"
