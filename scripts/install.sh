#!/usr/bin/env bash
# Installs nixl-telemetry under a prefix: what cargo-c's `cargo cinstall` would do for the C
# library (the versioned shared library with its SONAME links, the static library, the headers,
# a relocatable pkg-config file, DESTDIR, --libdir), plus what cargo-c does not cover (the
# command, the exporter plug-ins, the C++ plug-in host, the NIXL manager adapters, the CMake
# package).
#
# Why this script rather than cargo-c: cargo-c is installed by compiling it (`cargo install
# cargo-c`), about 420 crates including cargo itself and the C code of libgit2, libssh2, curl
# and SQLite, which on this project's two-core machines would take longer than the whole test
# command (about 3 minutes today, with a budget well under 20), on every fresh machine; its
# latest release also needs a newer rustc than the project's. And half of the installation is
# outside what cargo-c installs anyway.
#
# Only the shipped packages are built: `cargo build` builds the workspace's default members (the
# C library, the command, the shipped plug-ins), never test-support, so the `test-util` feature
# of the library (test hooks) is never on in what this script installs. c-api/tests/install.rs
# checks that.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/install.sh [--prefix DIR] [--libdir DIR] [--release | --debug] [--from DIR]
                          [--no-build] [--strip | --no-strip]

Builds the shipped packages (release profile by default) and installs under the prefix:
  bin/nixl-telemetry                      the command (read, stats, top, demo, fpm, serve, config)
  lib/libnixl_telemetry.so.VERSION        the shared library (SONAME libnixl_telemetry.so.0),
  lib/libnixl_telemetry.so.0 -> ...       with the usual links
  lib/libnixl_telemetry.so   -> ...so.0
  lib/libnixl_telemetry.a                 the static library
  lib/plugins/libtelemetry_exporter_*.so  the exporter plug-ins (not the example plug-in)
  lib/plugins/libnixl_telemetry_cpp_plugin_host.so  hosts NIXL's own C++ plug-ins
  lib/plugins/nixl/libtelemetry_exporter_*.so  the same exporters for NIXL's plug-in manager
  include/                                C and C++ headers
  include/nixl_dropin/                    NIXL's telemetry.h and telemetry_event.h, for NIXL builds
  lib/cmake/nixl_telemetry/               find_package(nixl_telemetry CONFIG) files
  lib/pkgconfig/nixl_telemetry.pc         pkg-config file
(lib/ is the --libdir.) Every file is relocatable: the pkg-config file names its directories
relative to itself (${pcfiledir}), the CMake files relative to themselves, and the library
finds its plug-ins beside itself, so the installed tree can be moved or packaged.

options:
  --prefix DIR  where to install (default /usr/local)
  --libdir DIR  the library directory, relative to the prefix or an absolute directory inside
                it (default lib; e.g. lib64 or lib/x86_64-linux-gnu)
  --release     build and install the release profile (the default)
  --debug       build and install the debug profile (implies --no-strip)
  --from DIR    install what cargo already built in DIR, e.g. target/release (implies --no-build)
  --no-build    do not run cargo build first
  --strip       strip debug information and local symbols (the default, except with --debug);
                the exported C functions and the plug-in entry points are kept
  --no-strip    install the files as cargo built them
  -h, --help    print this help

environment:
  DESTDIR       stage the installation under this directory (for packaging): files go to
                DESTDIR/PREFIX/..., as with `make install DESTDIR=...`
  CARGO_TARGET_DIR  where cargo builds (default target/ of this repository)
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
libdir=lib
profile=release
from=""
build=1
strip=""
while (($#)); do
  case "$1" in
    --prefix)
      [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }
      prefix="$2"; shift 2 ;;
    --libdir)
      [ $# -ge 2 ] || { echo "install.sh: --libdir needs a directory" >&2; exit 2; }
      libdir="$2"; shift 2 ;;
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

# The prefix as an absolute, normalised path (it need not exist yet), and the library directory
# relative to it.
prefix="$(realpath -m -- "$prefix")"
case "$libdir" in
  /*) libdir="$(realpath -m --relative-to="$prefix" -- "$libdir")" ;;
  *) libdir="$(realpath -m --relative-to="$prefix" -- "$prefix/$libdir")" ;;
esac
case "$libdir" in
  . | .. | ../*)
    echo "install.sh: --libdir must be a directory inside the prefix ($prefix)" >&2
    exit 2 ;;
esac
# From <libdir>/pkgconfig and from <libdir>/cmake/nixl_telemetry back up to the prefix.
up_from_libdir="$(sed 's|[^/][^/]*|..|g' <<<"$libdir")"
dest="${DESTDIR:-}$prefix"

if [ -z "$from" ]; then
  from="${CARGO_TARGET_DIR:-$root/target}/$profile"
fi
if ((build)); then
  # The default members (see the workspace's Cargo.toml): exactly the shipped packages.
  if [ "$profile" = release ]; then
    (cd "$root" && cargo build --release)
  else
    (cd "$root" && cargo build)
  fi
fi
for f in libnixl_telemetry.so libnixl_telemetry.a nixl-telemetry \
         libnixl_telemetry_cpp_plugin_host.so libnixl_telemetry_nixl_manager_adapter.so; do
  [ -f "$from/$f" ] || {
    echo "install.sh: $from/$f does not exist: build first (cargo build)" >&2
    exit 1
  }
done
if ((strip)) && ! command -v strip >/dev/null; then
  echo "install.sh: warning: 'strip' not found (binutils): installing unstripped files" >&2
  strip=0
fi

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")"
lib="$dest/$libdir"
mkdir -p "$dest/bin" "$dest/include" "$lib/cmake/nixl_telemetry" "$lib/pkgconfig"
# Plug-in directories are 0755 whatever the umask: the loader refuses group- or other-writable
# ones.
install -d -m 0755 "$lib/plugins" "$lib/plugins/nixl" "$dest/include/nixl_dropin"

# install_file MODE SOURCE DEST [strip option]: copies, then strips the copy.
install_file() {
  install -m "$1" "$2" "$3"
  if ((strip)) && [ $# -ge 4 ]; then
    local target="$3"
    [ -d "$target" ] && target="$target/$(basename "$2")"
    strip "$4" "$target"
  fi
}

shared="libnixl_telemetry.so.$version"
install_file 0755 "$from/libnixl_telemetry.so" "$lib/$shared" --strip-unneeded
ln -sfn "$shared" "$lib/libnixl_telemetry.so.0"
ln -sfn libnixl_telemetry.so.0 "$lib/libnixl_telemetry.so"
install_file 0644 "$from/libnixl_telemetry.a" "$lib/" --strip-debug
install_file 0755 "$from/nixl-telemetry" "$dest/bin/" --strip-unneeded
shopt -s nullglob
for plugin in "$from"/libtelemetry_exporter_*.so; do
  # The example plug-in is a template for plug-in authors, not an exporter to deploy.
  case "$(basename "$plugin")" in libtelemetry_exporter_example_rust.so) continue ;; esac
  install_file 0755 "$plugin" "$lib/plugins/" --strip-unneeded
  # The same exporter for NIXL's own plug-in manager: the adapter, named as the plug-in. Copies,
  # never links: the dynamic loader takes two names of one file for one library.
  install_file 0755 "$from/libnixl_telemetry_nixl_manager_adapter.so" \
    "$lib/plugins/nixl/$(basename "$plugin")" --strip-unneeded
done
# The library through which libnixl_telemetry hosts NIXL's own C++ plug-ins (API version 2).
install_file 0755 "$from/libnixl_telemetry_cpp_plugin_host.so" "$lib/plugins/" --strip-unneeded
install -m 0644 "$root"/include/*.h "$root"/include/*.hpp "$dest/include/"
# Drop-ins for NIXL's internal telemetry.h and telemetry_event.h (for a NIXL build without its
# telemetry core: put include/nixl_dropin on its include path).
install -m 0644 "$root"/include/nixl_dropin/*.h "$dest/include/nixl_dropin/"
# configure TEMPLATE OUTPUT UP: fills in a template of cmake/; UP leads from the output's
# directory back to the prefix.
configure() {
  sed -e "s|@VERSION@|$version|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@PREFIX_FROM_HERE@|$3|g" \
    "$root/cmake/$1" > "$2"
}
configure nixl_telemetryConfig.cmake.in "$lib/cmake/nixl_telemetry/nixl_telemetryConfig.cmake" \
  "$up_from_libdir/../.."
configure nixl_telemetryConfigVersion.cmake.in \
  "$lib/cmake/nixl_telemetry/nixl_telemetryConfigVersion.cmake" "$up_from_libdir/../.."
configure nixl_telemetry.pc.in "$lib/pkgconfig/nixl_telemetry.pc" "$up_from_libdir/.."
echo "installed nixl-telemetry $version into $prefix${DESTDIR:+ (staged in $DESTDIR)}" \
  "(add $prefix/bin to PATH for nixl-telemetry)"
