#!/usr/bin/env bash
# The GPU checks on a machine that cannot build loader (no package registry, no CAF):
# `make` packs what they need from a build of this machine into a folder, `run` runs them
# there from a copy of the repository with that folder beside it.  Results: docs/gpu.md.
#
#   bench/gpu_bundle.sh make [BUILD_DIR] [BUNDLE]   # default build .gpu: stripped binaries,
#                                                    # libcaf_core, and libcrypto/libz as a fallback
#   bench/gpu_bundle.sh run [BUNDLE] [OUT]          # on the GPU machine, in the repository root
#
# `run` writes at most eight files into OUT (default ./gpu-out): env.txt (machine, driver,
# libraries), pin_tests.txt (the pinned-memory and CUDA tests of both test binaries),
# demo.txt (demos/gpu_copy_overlap with and without pinning), gpu_check.txt with the .md
# and .jsonl of bench/gpu_check.sh (loader against PyTorch on the same data), handoff.txt
# (bench/gpu_torch_handoff.cpp built against the machine's PyTorch and run: pinned batches
# handed to libtorch), and suites.txt (both test binaries in full, 8 shards each).  Each step has its
# own time limit; the whole run takes about 6 minutes on 16 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

if [ "$mode" = make ]; then
  build=${2:-build}
  bundle=${3:-.gpu}
  rm -rf "$bundle"
  mkdir -p "$bundle/tests" "$bundle/demos" "$bundle/lib" "$bundle/lib2"
  grep -q "CUDA_TOOLKIT\|LOADER_WITH_CUDA:BOOL=ON" "$build/CMakeCache.txt" ||
    echo "[gpu_bundle] warning: $build was configured without CUDA" >&2
  strip -o "$bundle/loader" "$build/loader"
  strip -o "$bundle/demos/gpu_copy_overlap" "$build/demos/gpu_copy_overlap"
  for t in loader_core_tests loader_runtime_tests loader_test_worker_program \
           loader_test_no_worker_main loader_test_static_loaders loader_test_address_space; do
    strip -o "$bundle/tests/$t" "$build/tests/$t"
  done
  # Only what a machine with a recent glibc/libstdc++ may lack: CAF always; OpenSSL 3's
  # libcrypto and zlib only where `run` finds them missing (they would shadow the
  # machine's own for its Python too).
  # The static libraries and cudart for building bench/gpu_torch_handoff.cpp there
  # against the machine's own CUDA build of libtorch (PyTorch's wheel).
  mkdir -p "$bundle/static"
  for l in libloader_core.a libloader_datasets.a libloader_runtime.a; do strip --strip-debug -o "$bundle/static/$l" "$build/$l"; done
  cudart=$(sed -n 's/^CUDA_cudart_static_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
  cp "${cudart:-/usr/local/cuda/lib64/libcudart_static.a}" "$bundle/static/"
  cp -L "$(ldconfig -p | awk '/libcaf_core.so.0.17.6 / {print $NF; exit}')" "$bundle/lib/"
  for l in libcrypto.so.3 libz.so.1; do cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')" "$bundle/lib2/"; done
  strip "$bundle/lib/"*
  du -sh "$bundle"
  exit 0
fi

[ "$mode" = run ] || { echo "usage: $0 make [BUILD_DIR] [BUNDLE] | run [BUNDLE] [OUT]" >&2; exit 2; }
bundle=$(cd "${2:-.gpu}" && pwd)
out=${3:-gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH="$bundle/lib"
ldd "$bundle/loader" | grep -q "not found" && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$bundle/lib2"
# The test binaries carry the paths of the tree they were built in (golden data, the
# test programs under build/tests): make them resolve here.
src=$(grep -ao '/[^"]*/tests/golden' "$bundle/tests/loader_core_tests" | head -1)
src=${src%/tests/golden}
if [ -n "$src" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
[ -e build ] || ln -s "$bundle" build
{
  date -u; uname -a; grep PRETTY_NAME /etc/os-release; nproc; ldd --version | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  df -h /dev/shm; ulimit -l
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH; source paths: $src"; ldd "$bundle/loader"
} >"$out/env.txt" 2>&1

step() {  # step SECONDS FILE COMMAND...: appends the command, its output and its status
  local limit=$1 file=$2
  shift 2
  echo "### $* (limit ${limit} s)" >>"$file"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >>"$file" 2>&1
  echo "### exit status $? after $((SECONDS - t0)) s" >>"$file"
}

pin='PinnedMemory.*:PinTracker.*:PinMemory*:CudaCopy.*:Tensor.DLPack*'
step 120 "$out/pin_tests.txt" build/tests/loader_core_tests --gtest_filter="$pin"
step 120 "$out/pin_tests.txt" build/tests/loader_runtime_tests --gtest_filter='*PinMemory*'
step 60 "$out/demo.txt" build/demos/gpu_copy_overlap --n 4096 --workers 2
step 60 "$out/demo.txt" build/demos/gpu_copy_overlap --n 4096 --workers 2 --no-pin
step 60 "$out/demo.txt" build/demos/gpu_copy_overlap --n 4096 --workers 4
step 240 "$out/gpu_check.txt" env OUT_DIR="$out" LOADER_BIN=build/loader bench/gpu_check.sh

# The libtorch hand-off (docs/gpu.md): built here against the machine's PyTorch.
handoff() {  # handoff TORCH_PACKAGE_DIR: builds and runs bench/gpu_torch_handoff.cpp
  local t=$1 abi
  abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  g++ -std=c++17 -O2 -D_GLIBCXX_USE_CXX11_ABI="$abi" bench/gpu_torch_handoff.cpp libloader_torch/loader/torch.cpp \
    -Ilibloader -Iactors -Ilibloader_torch -I"$t/include" -I"$t/include/torch/csrc/api/include" \
    -o "$bundle/gpu_torch_handoff" "$bundle/static/libloader_runtime.a" "$bundle/static/libloader_datasets.a" \
    "$bundle/static/libloader_core.a" "$bundle/lib/libcaf_core.so.0.17.6" "$bundle/static/libcudart_static.a" \
    -L"$t/lib" -Wl,-rpath,"$t/lib" -Wl,--no-as-needed -ltorch_cuda -ltorch -Wl,--as-needed -ltorch_cpu -lc10_cuda -lc10 \
    "$bundle/lib2/libcrypto.so.3" "$bundle/lib2/libz.so.1" -ldl -lpthread -lrt || return
  "$bundle/gpu_torch_handoff" --n 2048 --workers 2 --epochs 2
}
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
export bundle
export -f handoff
if [ -n "$torch_dir" ]; then step 300 "$out/handoff.txt" bash -c 'handoff "$1"' handoff "$torch_dir"; fi

# Both suites in full, 8 shards at a time (GoogleTest's sharding), summarised.
tmp=$(mktemp -d)
for bin in loader_core_tests loader_runtime_tests; do
  for i in 0 1 2 3 4 5 6 7; do
    GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i timeout -k 5 200 "build/tests/$bin" >"$tmp/$bin.$i" 2>&1 &
  done
  wait
done
{
  for f in "$tmp"/*; do
    echo "### $(basename "$f"): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$f" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$f"
  done
  echo "### failures in full"
  for f in "$tmp"/*; do grep -q '^\[  FAILED  \]' "$f" && grep -B30 -E '^\[  FAILED  \] [A-Za-z].*\(' "$f" | head -150; done
  echo "### left in /dev/shm: $(ls /dev/shm | grep -c loader)"
} >"$out/suites.txt" 2>&1
rm -rf "$tmp"
ls -la "$out"
