"""Builds rrfp._rrfp with the project's CMake (only its target and what it needs) for the
interpreter running pip; pyproject.toml has the package's metadata."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def configure_command(build):
    """How a fresh tree is configured for the extension alone (tests and benchmarks off)."""
    return ["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DRRFP_BUILD_TESTS=OFF", "-DRRFP_BUILD_BENCH=OFF",
            "-DRRFP_WITH_PYTHON=ON", f"-DRRFP_PYTHON_EXECUTABLE={sys.executable}"]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # RRFP_BUILD_DIR: a tree of this source already configured with the Python extension
        # (the README's build/, say): the extension is brought up to date there and taken as
        # it is, without configuring (which would turn that tree's tests off) and without
        # compiling everything again in build-pip/ (minutes on 2 cores). The tree must be
        # for this interpreter's Python version: CMake named it when it was configured.
        given = os.environ.get("RRFP_BUILD_DIR")
        if given:
            build = Path(given).resolve()
            if not (build / "CMakeCache.txt").is_file():
                raise RuntimeError(f"RRFP_BUILD_DIR={given}: not a configured CMake build tree "
                                   "(no CMakeCache.txt); unset it to build in build-pip/")
        else:
            build = ROOT / "build-pip"
            subprocess.check_call(configure_command(build))
        subprocess.check_call(["cmake", "--build", str(build), "--target", "rrfp_python",
                               "-j", str(os.cpu_count() or 1)])
        # The name carries the Python version and ABI: another interpreter's would not import.
        built = build / "python" / "rrfp" / ("_rrfp" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.is_file():
            raise RuntimeError(f"{built} was not built: the tree at {build} was configured for "
                               f"another Python than {sys.executable}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("rrfp._rrfp", sources=[])], cmdclass={"build_ext": CMakeBuild})
