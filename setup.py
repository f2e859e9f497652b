"""Builds the `loader` Python package with CMake (see pyproject.toml for the command).

The extension, libloader.so and the loader-worker program come from the CMake target
loader_python, built in build-pip/cmake-<python>/ with the interpreter that runs pip; the
pure-Python files come from python/loader/.  A second install reuses that CMake build
tree (CMake rebuilds what changed) unless it was configured for another interpreter or
another source tree, in which case it starts afresh.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(HERE, "CMakeLists.txt")) as f:
        m = re.search(r"project\(loader VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("setup.py: no `project(loader VERSION x.y.z)` in CMakeLists.txt")
    return m.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    # What the CMake target puts next to the Python files (python/CMakeLists.txt).
    ARTIFACTS = ("libloader.so", "loader-worker")

    def build_extension(self, ext):
        key = hashlib.sha256(f"{os.path.realpath(sys.executable)}|{HERE}".encode()).hexdigest()[:12]
        build_dir = os.path.join(HERE, "build-pip", f"cmake-{key}")
        cache = os.path.join(build_dir, "CMakeCache.txt")
        if os.path.exists(cache):
            with open(cache) as f:
                text = f.read()
            if f"CMAKE_HOME_DIRECTORY:INTERNAL={HERE}" not in text:
                shutil.rmtree(build_dir)  # configured for another tree: nothing in it is ours
        os.makedirs(build_dir, exist_ok=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        configure = [
            "cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}", "-DLOADER_BUILD_PYTHON=ON",
            "-DLOADER_BUILD_TESTS=OFF", "-DLOADER_BUILD_DEMOS=OFF", "-DLOADER_BUILD_BENCH=OFF",
            "-DLOADER_BUILD_FUZZ=OFF",
        ] + os.environ.get("LOADER_CMAKE_ARGS", "").split()
        subprocess.check_call([a for a in configure if a])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "loader_python", "-j", jobs])
        out = os.path.join(build_dir, "python", "loader")
        dest = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(dest, exist_ok=True)
        built = [n for n in os.listdir(out) if n.startswith("_C.") and n.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"setup.py: expected one _C extension in {out}, found {built}")
        shutil.copy2(os.path.join(out, built[0]), self.get_ext_fullpath(ext.name))
        for name in self.ARTIFACTS:
            shutil.copy2(os.path.join(out, name), os.path.join(dest, name))
        self.copy_headers(os.path.join(dest, "include", "loader"))

    @staticmethod
    def copy_headers(dest):
        """The public C++ headers (cmake/install.cmake's list), for extension modules that
        register datasets: g++ -I$(python -c 'import loader; print(loader.include_dir())')."""
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        for src in (os.path.join(HERE, "libloader", "loader"), os.path.join(HERE, "datasets", "loader")):
            for dirpath, dirnames, filenames in os.walk(src):
                dirnames[:] = [d for d in dirnames if d != "detail"]
                rel = os.path.relpath(dirpath, src)
                for f in filenames:
                    if f.endswith(".h"):
                        os.makedirs(os.path.join(dest, rel), exist_ok=True)
                        shutil.copy2(os.path.join(dirpath, f), os.path.join(dest, rel, f))
        for f in ("dataloader.h", "worker_main.h", "shared_tensors.h", "serve.h", "serve_cli.h"):
            shutil.copy2(os.path.join(HERE, "actors", "loader", f), os.path.join(dest, f))


setup(
    version=version(),
    packages=["loader"],
    package_dir={"": "python"},
    package_data={"loader": ["py.typed", "*.pyi", "libloader.so", "loader-worker", "include/loader/*.h",
                             "include/loader/*/*.h"]},
    ext_modules=[CMakeExtension("loader._C")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
