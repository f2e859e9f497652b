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
