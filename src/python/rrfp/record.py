"""rrfp.StepRecord: what a step did (simulated or measured)."""
import json

from ._args import path_or_name

# str(path) made None a file named "None" in the working folder.
_PATH = "a file's path (str or a path object)"


def _output_path(path):
    """path_or_name's of a file to write; '' (an unset variable's) raises ValueError, as the
    other paths refuse it: it failed renaming a temporary made in '.'."""
    path = path_or_name("path", path, _PATH)
    if path in ("", b""):
        raise ValueError("path: '' names nothing (an unset variable?); give a file's path")
    if path in ("-", b"-"):  # it wrote a file named '-', as the command refuses
        raise ValueError("path: '-' is no standard output here; give a file's path")
    return path


class StepRecord:
    """One step: makespan, bubble, per-stage busy/blocked/idle, peak D, dispatch gap.

    Times are seconds. save_trace (Chrome trace), save_svg (timeline) and table() report it
    as `rrfp simulate` does.
    """

    def __init__(self, core):
        self._core = core

    makespan = property(lambda self: self._core.makespan)
    lower_bound = property(lambda self: self._core.lower_bound)
    bubble = property(lambda self: self._core.bubble)
    efficiency = property(lambda self: self._core.efficiency)
    dispatch_gap_us = property(lambda self: self._core.dispatch_gap_us)
    dispatch_gaps_us = property(lambda self: self._core.dispatch_gaps_us)
    stages = property(lambda self: self._core.stages)
    tasks = property(lambda self: self._core.tasks)
    label = property(lambda self: self._core.label)

    @property
    def peak_d(self):
        return [s["peak_d"] for s in self.stages]

    def table(self):
        return self._core.table()

    def __copy__(self):
        return StepRecord(self._core)  # read-only: a copy may share it

    def __reduce__(self):
        # pickle, deepcopy and torch.save said "cannot pickle 'rrfp._rrfp.StepRecord' object".
        raise TypeError("a StepRecord cannot be pickled or deep-copied (it holds the step's "
                        "record in C++); keep record.to_dict(), plain values, or write "
                        "save_trace()")

    def to_dict(self):
        return json.loads(self._core.json())

    def save_trace(self, path):
        """Writes the step as a Chrome trace (Perfetto), gzipped where `path` ends in .gz
        (`rrfp predict` and a replay read NAME.json and NAME.json.gz)."""
        self._core.save_trace(_output_path(path))

    def save_svg(self, path):
        self._core.save_svg(_output_path(path))

    def __repr__(self):
        return repr(self._core)
