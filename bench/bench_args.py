"""Argument types of the benchmark scripts: a count of 0 or a budget of nan was taken and
failed later in a traceback (a ZeroDivisionError, a median of no times); argparse now refuses
it in one line naming the flag. Needs only the standard library."""
import argparse
import math


def count(text):
    """A whole number of at least 1 (steps, rows, widths, seeds, ...)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return n


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
