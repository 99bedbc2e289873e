# The package is imported from the build tree: RRFP_PYTHONPATH (set by ctest) or build/python.
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("RRFP_PYTHONPATH",
                                  os.path.join(_here, "..", "..", "build", "python")))
sys.path.insert(0, _here)
