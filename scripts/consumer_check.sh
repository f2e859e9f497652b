#!/usr/bin/env bash
# The installed package, used from the outside as a new project would (a ctest test,
# `package_consumer`; also by hand):
#   1. `cmake --install` of a build into a fresh prefix: the public headers only; each
#      of them compiles alone without a warning under strict flags (the build's
#      compiler, and clang++ when found);
#   2. tests/consumer, configured with find_package(loader) against that prefix, built
#      and run (its own dataset with 2 worker processes for 2 epochs, the usage example
#      of loader/dataloader.h verbatim, registrations in a static library of its own);
#   3. a tiny program compiled and linked with `pkg-config --cflags --libs loader`;
#   4. a parent project that add_subdirectory()s this source tree: configures without
#      GTest or Eigen, builds no tests/demos/bench, leaves the parent's build type alone.
#
#   scripts/consumer_check.sh [BUILD_DIR]    # default: build (configured and built first
#                                            # when needed: only what gets installed)
#   CONSUMER_CHECK_BUILD_PARENT=1 scripts/consumer_check.sh   # 4. also builds the parent
#                                            # (compiles loader again: minutes) and runs it
#
# Works in BUILD_DIR/consumer-check/ (kept, so a second run rebuilds little; the install
# prefix in it is emptied first).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${1:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "consumer-check: configuring $build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
build=$(cd "$build" && pwd)
work="$build/consumer-check"
prefix="$work/prefix"
step() { echo "consumer-check: $*"; }
die() { echo "consumer-check: FAILED: $*" >&2; exit 1; }
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }

cxx=$(cache_value CMAKE_CXX_COMPILER)
launcher=$(cache_value CMAKE_CXX_COMPILER_LAUNCHER)
cmake_args=(-DCMAKE_CXX_COMPILER="$cxx")
[ -n "$launcher" ] && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
jobs=$(nproc)

# ---------------------------------------------------------------- 1. install
# What gets installed is up to date already under ctest (a no-op then).
mkdir -p "$work"
cmake --build "$build" -j"$jobs" --target loader_tool loader_datasets >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; die "building $build"; }
rm -rf "$prefix"
step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
inc="$prefix/include/loader"
for f in dataloader.h dataset.h registration.h worker_main.h fashion_mnist.h idx.h serialization/pt.h; do
  [ -f "$inc/$f" ] || die "the installed headers lack loader/$f"
done
private=$(cd "$inc" && ls runtime detail 2>/dev/null | grep -v ':$' | grep . || true)
[ -z "$private" ] || die "private headers were installed: $private"
config_dir=$(dirname "$(find "$prefix" -name loaderConfig.cmake | head -1)")
[ -f "$config_dir/loaderConfigVersion.cmake" ] && [ -f "$config_dir/FindCAF.cmake" ] || die "incomplete package in $config_dir"
[ -x "$prefix/bin/loader" ] || die "bin/loader was not installed"
if grep -q 'loader_WITH_CUDA ON' "$config_dir/loaderConfig.cmake"; then
  grep -q 'CUDA::cudart_static' "$config_dir"/loaderTargets.cmake || die "a CUDA build whose package lacks cudart_static"
fi

# ---------------------------------------------------------------- 1b. headers alone, strict warnings
# Each installed header compiles on its own (it includes what it uses) and without a
# warning under the flags a strict consumer builds with: clang's -Wconversion also
# checks templates no one instantiated, g++'s only instantiated ones (both when found).
strict=(-std=c++17 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Werror -fsyntax-only -I"$prefix/include")
compilers=("$cxx")
command -v clang++ >/dev/null && [ "$(basename "$cxx")" != clang++ ] && compilers+=(clang++)
step "each installed header alone, ${compilers[*]}, ${strict[*]:0:11}"
mkdir -p "$work/headers"
for h in $(cd "$prefix/include" && find loader -name '*.h' | sort); do
  printf '#include "%s"\n' "$h" >"$work/headers/one.cpp"
  for c in "${compilers[@]}"; do
    "$c" "${strict[@]}" "$work/headers/one.cpp" >"$work/headers/one.log" 2>&1 ||
      { cat "$work/headers/one.log"; die "$h does not compile alone without warnings ($c)"; }
  done
done

# ---------------------------------------------------------------- 2. find_package consumer
step "tests/consumer: configure with find_package(loader), build"
cmake -S tests/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  "${cmake_args[@]}" >"$work/consumer-configure.log" 2>&1 || { cat "$work/consumer-configure.log"; die "configure"; }
grep 'consumer: loader' "$work/consumer-configure.log" || true
cmake --build "$work/consumer" -j"$jobs" >"$work/consumer-build.log" 2>&1 || { cat "$work/consumer-build.log"; die "build"; }
for app in consumer_app static_whole static_dropped; do
  step "run $app"
  timeout -k 5 120 "$work/consumer/$app" || die "$app"
done
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  step "run header_example (the usage example of loader/dataloader.h, verbatim)"
  timeout -k 5 180 "$work/consumer/header_example" || die "header_example"
else
  step "SKIP header_example: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
fi

# ---------------------------------------------------------------- 3. pkg-config
pcdir=$(dirname "$(find "$prefix" -name loader.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs loader) || die "pkg-config --cflags --libs loader"
step "pkg-config --cflags --libs loader: $flags"
mkdir -p "$work/pkgconfig"
cat >"$work/pkgconfig/tiny.cpp" <<'CPP'
#include <cstdio>
#include "loader/dataloader.h"
#include "loader/worker_main.h"
int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  if (!loader::is_registered_dataset("fashion_mnist")) { std::puts("fashion_mnist is not registered"); return 1; }
  auto ds = loader::make_dataset({"range", loader::Value::dict({{"n", 10}})});
  loader::DataLoaderOptions o;
  o.batch_size = 4;
  loader::DataLoader dl(ds, o);
  int64_t sum = 0;
  for (loader::Value& b : dl) for (int64_t v : b.to_tensor().to_int64_vector()) sum += v;
  std::printf("tiny: sum %lld\n", static_cast<long long>(sum));
  return sum == 45 ? 0 : 1;
}
CPP
# shellcheck disable=SC2086
${launcher:+$launcher} "$cxx" -std=c++17 -O1 "$work/pkgconfig/tiny.cpp" $flags -o "$work/pkgconfig/tiny" ||
  die "compiling and linking with pkg-config's flags"
"$work/pkgconfig/tiny" || die "the pkg-config program"

# ---------------------------------------------------------------- 4. add_subdirectory
step "add_subdirectory(loader) from a parent project, without GTest and Eigen"
parent="$work/parent"
mkdir -p "$parent/src"
cat >"$parent/src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(parent LANGUAGES CXX)
add_subdirectory("$src" loader)
add_executable(app app.cpp)
target_link_libraries(app PRIVATE loader::loader)
foreach(t loader_core_tests loader_runtime_tests fashion_mnist_train transport_bench pt_fuzzer)
  if(TARGET \${t})
    message(FATAL_ERROR "add_subdirectory(loader) defined the target \${t}")
  endif()
endforeach()
if(CMAKE_BUILD_TYPE)
  message(FATAL_ERROR "the parent's build type became '\${CMAKE_BUILD_TYPE}'")
endif()
CMAKE
cp "$work/pkgconfig/tiny.cpp" "$parent/src/app.cpp"
rm -rf "$parent/build"
cmake -S "$parent/src" -B "$parent/build" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON "${cmake_args[@]}" >"$parent/configure.log" 2>&1 ||
  { cat "$parent/configure.log"; die "configuring a parent project that add_subdirectory()s loader"; }
bt=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$parent/build/CMakeCache.txt")
[ -z "$bt" ] || die "the parent's cached build type became '$bt'"
[ -z "${CONSUMER_CHECK_BUILD_PARENT:-}" ] ||
  { cmake --build "$parent/build" -j"$jobs" --target app >"$parent/build.log" 2>&1 || { tail -50 "$parent/build.log"; die "building the parent"; }; "$parent/build/app" || die "the parent's app"; }
step "ok"
