#!/usr/bin/env bash
# Builds CAF 0.17.6 (core and io, shared libraries) with ThreadSanitizer from Debian's
# source archive and installs it into a prefix, for the TSan build of the tests
# (LOADER_SANITIZE=thread scripts/test.sh calls this).  Debian's libcaf is not
# instrumented, so without it TSan reports thousands of false races at every CAF
# mailbox hand-off.
#
#   scripts/build_caf_tsan.sh      # prints the prefix on stdout, progress on stderr
#
# Prefix: ${CAF_TSAN_PREFIX:-$HOME/.cache/loader/caf-0.17.6-tsan}.  Idempotent: a no-op
# when the prefix already holds the libraries.  Compiler: $CXX (default g++; it must be
# the compiler that builds loader, as GCC's and Clang's TSan runtimes differ).
# Needs root (or sudo) only the first time, to add a deb-src entry for Debian's archive
# (/etc/apt/sources.list.d/loader-deb-src.sources, a copy of debian.sources with
# "Types: deb-src").  Takes about 25 minutes on a busy 2-core machine (see docs/tsan.md).
set -euo pipefail

CAF_VERSION=0.17.6
PREFIX=${CAF_TSAN_PREFIX:-$HOME/.cache/loader/caf-$CAF_VERSION-tsan}
CXX=${CXX:-g++}
JOBS=${CAF_TSAN_JOBS:-$(nproc)}
STAMP="$PREFIX/.loader-caf-tsan"

have_prefix() {
  [ -f "$STAMP" ] && [ -e "$PREFIX/lib/libcaf_core.so" ] && [ -e "$PREFIX/lib/libcaf_io.so" ] &&
    [ -f "$PREFIX/include/caf/all.hpp" ] && [ -f "$PREFIX/include/caf/io/all.hpp" ]
}
if have_prefix; then echo "$PREFIX"; exit 0; fi

# Two builds at once (another checkout, another shell) would trample each other.
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
if have_prefix; then echo "$PREFIX"; exit 0; fi

log() { echo "build_caf_tsan: $*" >&2; }
start=$(date +%s)
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

# ---------------------------------------------------------------- source
src_list=/etc/apt/sources.list.d/loader-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src ' /etc/apt/sources.list; then
  log "adding $src_list (Debian's deb stanzas with Types: deb-src)"
  sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$src_list" >/dev/null
  $SUDO apt-get update -qq
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/caf-tsan.XXXXXX")
trap 'rm -rf "$work" "$PREFIX.tmp"' EXIT
trap 'exit 130' INT TERM HUP
cd "$work"
log "downloading actor-framework $CAF_VERSION sources into $work"
# The Debian patch tarball (debian.tar.xz) answers 404 on the mirror and is not needed:
# apt-get fails for it, so check the orig tarball instead of apt-get's status.
apt-get source --download-only actor-framework >apt-source.log 2>&1 || true
orig=actor-framework_$CAF_VERSION.orig.tar.gz
if [ ! -s "$orig" ]; then
  cat apt-source.log >&2
  log "error: $orig did not download"
  exit 1
fi
# The .dsc (when it came) lists the orig tarball's SHA-256; apt-get has checked it
# against the signed Sources index already, check again in case the .dsc is all we have.
dsc=$(ls actor-framework_*.dsc 2>/dev/null | head -n1 || true)
if [ -n "$dsc" ]; then
  want=$(awk -v f="$orig" '/^Checksums-Sha256:/{s=1;next} /^[^ ]/{s=0} s && $3==f {print $1}' "$dsc")
  if [ -n "$want" ] && [ "$(sha256sum "$orig" | cut -d' ' -f1)" != "$want" ]; then
    log "error: $orig does not match the SHA-256 in $dsc"
    exit 1
  fi
fi
tar xzf "$orig"
srcdir=$(find . -maxdepth 1 -mindepth 1 -type d -name 'actor-framework*' | head -n1)
[ -n "$srcdir" ] || srcdir=$(tar tzf "$orig" | head -n1 | cut -d/ -f1)

# g++ 12 no longer pulls <limits> in transitively; receive_buffer.hpp uses
# std::numeric_limits.
rb="$srcdir/libcaf_io/caf/io/network/receive_buffer.hpp"
grep -q '#include <limits>' "$rb" || sed -i '0,/#include <cstddef>/s//#include <cstddef>\n#include <limits>/' "$rb"
grep -q '#include <limits>' "$rb" || { log "error: could not patch $rb"; exit 1; }

# ---------------------------------------------------------------- build
log "configuring (core and io, shared, -fsanitize=thread -O1 -g, $CXX)"
tsan_flags="-fsanitize=thread -O1 -g -fno-omit-frame-pointer"
cmake -S "$srcdir" -B build \
  -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="$tsan_flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_INSTALL_PREFIX="$PREFIX.tmp" \
  -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_RPATH="$PREFIX/lib" \
  -DCAF_NO_EXAMPLES=ON -DCAF_NO_TOOLS=ON -DCAF_NO_UNIT_TESTS=ON -DCAF_NO_OPENSSL=ON \
  -DCAF_NO_PYTHON=ON -DCAF_NO_BENCHMARKS=ON -DCAF_NO_OPENCL=ON -DCAF_NO_SUMMARY=ON \
  -DCAF_BUILD_STATIC=OFF -DCAF_BUILD_STATIC_ONLY=OFF \
  >cmake.log 2>&1 || { cat cmake.log >&2; exit 1; }
log "building with $JOBS jobs (nice -n 5)"
nice -n 5 cmake --build build -j"$JOBS" >build.log 2>&1 || { tail -n 60 build.log >&2; exit 1; }
rm -rf "$PREFIX.tmp"
cmake --install build >install.log 2>&1 || { cat install.log >&2; exit 1; }
# libcaf_io's RUNPATH names the prefix, so it finds this libcaf_core, not Debian's.
ls "$PREFIX.tmp/lib"/libcaf_core.so* "$PREFIX.tmp/lib"/libcaf_io.so* >/dev/null
echo "CAF $CAF_VERSION from Debian's $orig, core+io, shared, $tsan_flags, $($CXX --version | head -n1)" \
  >"$PREFIX.tmp/.loader-caf-tsan"
rm -rf "$PREFIX"
mv "$PREFIX.tmp" "$PREFIX"
log "installed into $PREFIX after $(( $(date +%s) - start )) s"
echo "$PREFIX"
