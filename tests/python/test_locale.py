"""Numbers read and written the same under a locale whose decimal mark is a comma, which a
script may set (locale.setlocale(LC_ALL, "de_DE.UTF-8")) and the C library then follows: the
extension's SVG read `width="1200,00"`, its table "321,80", and a replay CSV's "100.75" was
refused as no number. The locale is built into a temporary folder from Debian's locale sources
(the locales package); without them the test skips."""
import os
import subprocess
import sys

import pytest

import rrfp

_PATH = os.path.dirname(os.path.dirname(os.path.abspath(rrfp.__file__)))

SCRIPT = """if True:
    import locale, os, sys, rrfp
    def run():
        r = rrfp.simulate(pp=2, microbatches=2, replay="rep.csv", hint="1f1b", policy="fixed")
        r.save_svg("t.svg")
        return r.makespan, r.table(), open("t.svg").read()
    c = run()
    locale.setlocale(locale.LC_ALL, "de_DE.UTF-8")
    assert locale.localeconv()["decimal_point"] == ","
    de = run()
    print(c == de, c[0])
"""


def test_numbers_do_not_follow_a_decimal_comma_locale(tmp_path):
    folder = tmp_path / "locales"
    folder.mkdir()
    try:
        built = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8",
                                str(folder / "de_DE.UTF-8")], capture_output=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("no localedef here to build a decimal-comma locale with")
    if not (folder / "de_DE.UTF-8").exists():
        pytest.skip("no de_DE locale source (Debian's locales package) to build a decimal-comma "
                    f"locale from: {built.stderr.decode()[:200]}")
    rows = ["stage,chunk,microbatch,kind,duration_us"]
    for stage in range(2):
        for mb in range(2):
            rows += [f"{stage},{stage},{mb},F,{100.75 + mb}", f"{stage},{stage},{mb},B,200.25"]
    (tmp_path / "rep.csv").write_text("\n".join(rows) + "\n")
    env = dict(os.environ, PYTHONPATH=_PATH, LOCPATH=str(folder))
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    same, makespan = done.stdout.split()
    assert same == "True" and float(makespan) > 0, done.stdout
