"""Argument types of the benchmark scripts: a count of 0 or a budget of nan was taken and
failed later in a traceback (a ZeroDivisionError, a median of no times); argparse now refuses
it in one line naming the flag. Also the line each timed benchmark prints first: the project
asks every benchmark to state its machine, build type and seed. Needs only the standard
library (torch and rrfp are imported only by setting_line, when called)."""
import argparse
import math
import os
import platform
import shutil
import subprocess
import sys


def at_least(least, why=""):
    """A type for a whole number of at least `least`: a script that drops warm-up steps takes
    the median of what is left, and a count that leaves nothing ended in a StatisticsError.
    `why` (e.g. "the first 2 are warm-up") goes into the refusal."""
    reason = f" ({why})" if why else ""

    def parse(text):
        try:
            n = int(text)
        except ValueError:
            n = least - 1
        if n < least:
            raise argparse.ArgumentTypeError(
                f"must be a whole number of at least {least}{reason}, got {text!r}")
        return n
    parse.__name__ = f"at_least_{least}"  # argparse names the type in some of its messages
    return parse


count = at_least(1)
count.__doc__ = "A whole number of at least 1 (steps, rows, widths, seeds, ...)."


def non_negative(text):
    """A finite number of at least 0 (a jitter's spread)."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0 <= x < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text!r}")
    return x


def positive(text):
    """A finite number above 0 (a budget in seconds)."""
    x = non_negative(text)
    if x == 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return x


def executable(text):
    """The path of an executable file (an rrfp binary): a wrong one was found only at its first
    use, in a FileNotFoundError traceback, sometimes after minutes of other work. A bare name
    is looked up on PATH, as running it would, and comes back as its full path."""
    if os.path.isfile(text) and os.access(text, os.X_OK):
        return text
    found = shutil.which(text) if os.sep not in text else None
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file")
    return found


def output_of(cmd, **kw):
    """stdout of `cmd` (an rrfp command line); where it fails, the script ends with its stderr
    (check=True said only "returned non-zero exit status 2", rrfp's one-line reason lost)."""
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd[:3]))} ...: exit {done.returncode}: "
                 f"{done.stderr.strip()[-500:]}")
    return done.stdout


def launcher_rank():
    """This process's rank under torchrun or mpirun (0 when started alone), read from the
    launcher's variables: the setting line is printed before a Pipeline knows its rank."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    # Arm's /proc/cpuinfo has no model name, and other systems no /proc.
    return platform.processor() or platform.machine() or "unknown CPU"


def setting_line(seed=None):
    """One line stating what a benchmark's numbers depend on: the machine (CPU model, logical
    cores, the GPU where torch sees one), torch's version, rrfp's build type and the seed.
    seed None: the script draws nothing at random."""
    import torch
    machine = f"{_cpu_model()}, {os.cpu_count()} logical cores"
    if torch.cuda.is_available():
        machine += f", GPU {torch.cuda.get_device_name()}"
    try:
        import rrfp
        build = getattr(rrfp, "build_type", "unknown")
    except ImportError:  # a script that only runs the rrfp binary, without the package
        build = "unknown (package not importable)"
    seed_text = "none (no random draws)" if seed is None else seed
    return f"machine: {machine}; torch {torch.__version__}; rrfp build {build}; seed {seed_text}"
