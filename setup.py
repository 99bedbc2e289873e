"""Builds rrfp._rrfp with the project's CMake (only its target and what it needs) for the
interpreter running pip; pyproject.toml has the package's metadata."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = ROOT / "build-pip"
        subprocess.check_call([
            "cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DRRFP_BUILD_TESTS=OFF", "-DRRFP_BUILD_BENCH=OFF",
            "-DRRFP_WITH_PYTHON=ON", f"-DRRFP_PYTHON_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", str(build), "--target", "rrfp_python",
                               "-j", str(os.cpu_count() or 1)])
        built = next((build / "python" / "rrfp").glob("_rrfp*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("rrfp._rrfp", sources=[])], cmdclass={"build_ext": CMakeBuild})
