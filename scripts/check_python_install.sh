#!/usr/bin/env bash
# Installs the Python package as the README says, into a fresh virtual environment, and
# runs the pytest suite against the installed copy from another directory (CI runs this
# after scripts/test.sh).  No network: Debian's torch through --system-site-packages,
# Debian's setuptools through --no-build-isolation.
#   scripts/check_python_install.sh            # venv in a temporary directory, removed after
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
venv=$(mktemp -d /tmp/loader-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv/V"
"$venv/V/bin/pip" install --no-build-isolation . 2>&1 | tail -n 3
src=$PWD
cd "$venv"
"$venv/V/bin/python" -c "import loader, sys; print('import loader:', loader.__version__, loader.__file__)"
# The extension test needs a library linked against the installed libloader.so: left out
# here (LOADER_TEST_EXT unset), it runs in the build tree's suite.
env -u LOADER_TEST_EXT -u PYTHONPATH "$venv/V/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
# A user's own C++ dataset against the installed package (docs/python.md, "Your own C++ dataset"):
# built with the package's headers and libloader.so, loaded, and run by its worker processes.
pkg=$("$venv/V/bin/python" -c "import loader, os; print(os.path.dirname(loader.__file__))")
g++ -std=c++17 -O1 -shared -fPIC "$src/python/tests/ext/squares.cpp" -I"$pkg/include" -L"$pkg" -lloader \
  -Wl,-rpath,"$pkg" -o "$venv/libsquares.so"
"$venv/V/bin/python" - "$venv/libsquares.so" <<'PY'
import sys, torch, loader
loader.load_library(sys.argv[1])
ds = loader.datasets.from_handle("test_squares", {"n": 40, "offset": 2})
got = torch.cat([b[0] for b in loader.DataLoader(ds, batch_size=8, num_workers=2)]).tolist()
assert got == [i * i + 2 for i in range(40)], got
print("extension dataset from the installed package: ok (2 workers)")
PY
