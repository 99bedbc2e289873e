# The package is imported from the build tree: RRFP_PYTHONPATH (set by ctest) or build/python.
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("RRFP_PYTHONPATH",
                                  os.path.join(_here, "..", "..", "build", "python")))
sys.path.insert(0, _here)

import faulthandler  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# The most one test may take (the slowest take about 20 s here). A test past it ends the run
# naming itself, with every thread's stack: the suite's one ctest limit (900 s) ended it
# naming nothing, after waiting out the rest of its time.
TEST_LIMIT_S = 300


@pytest.fixture(autouse=True)
def _limited_and_seeded(request):
    # Tests that draw without a seed of their own draw the same numbers run alone (-k) as in
    # the whole suite: the global generator's state no longer depends on the tests before.
    torch.manual_seed(0)
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def expired():
        if capture is not None:
            capture.suspend_global_capture(in_=True)
        sys.stderr.write(f"\n{request.node.nodeid}: still running after {TEST_LIMIT_S} s "
                         "(tests/python/conftest.py); every thread's stack:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(TEST_LIMIT_S, expired)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
