"""bench/pipeline_gpu.py, the GPU table of rrfp.Pipeline, kept working where there is no GPU: a
tiny run of it on the CPU, and its reading of a profiler trace on a trace made up here."""
import csv
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pipeline_gpu  # noqa: E402


def test_a_tiny_run_on_the_cpu_writes_every_row(tmp_path):
    out = tmp_path / "p.csv"
    env = dict(os.environ, PYTHONPATH=os.environ.get("RRFP_PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "pipeline_gpu.py"), "--device", "cpu",
         "--dtype", "f32", "--d-model", "16", "--heads", "2", "--layers", "2", "--pp", "2",
         "--seq", "16", "--rows", "1", "--microbatches", "4", "--warmup", "1", "--steps", "2",
         "--runs", "J0:fixed-1f1b,J2:ready-bfw,J3:ready-bf", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out)))
    assert [x["run"] for x in rows] == ["j0-fixed-1f1b", "j2-ready-bfw", "j3-ready-bf"]
    for x in rows:
        assert float(x["step_ms"]) > 0 and int(x["steps"]) == 2
        assert float(x["gap_us_p99"]) >= float(x["gap_us_median"]) >= 0
    assert "| j0-fixed-1f1b |" in r.stdout and "| 1.00x |" in r.stdout


def test_bad_runs_and_bf16_on_the_cpu_are_refused():
    for extra, says in ((["--runs", "J9:fixed-1f1b"], "--runs: 'J9:fixed-1f1b'"),
                        (["--device", "cpu"], "--dtype bf16 (autocast) needs --device cuda")):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pipeline_gpu.py")] + extra,
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=os.environ.get("RRFP_PYTHONPATH", "")))
        assert r.returncode != 0 and says in r.stderr, r.stderr


def test_the_trace_reader_names_streams_by_their_marker_and_merges_overlaps(tmp_path):
    def kernel(stream, ts, dur, name="gemm"):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                "args": {"stream": stream}}
    events = [
        # stage 1's stream (marker 2 units long), two kernels overlapping by 5 us
        kernel(20, 0, 200, "void at::cuda::spin_kernel(long)"), kernel(20, 300, 10),
        kernel(20, 305, 10),
        # stage 0's stream (marker 1 unit long), one kernel and a copy
        kernel(13, 0, 100, "spin_kernel"), kernel(13, 150, 40),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "ts": 400, "dur": 6,
         "args": {"stream": 13}},
        # the default stream: the optimizer's kernels, no marker
        kernel(7, 500, 1000),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9999, "args": {}},
    ]
    path = tmp_path / "trace.json"
    json.dump({"traceEvents": events}, open(path, "w"))
    assert pipeline_gpu.kernel_busy_by_stage(str(path), 2) == [46.0, 15.0]
    assert pipeline_gpu.kernel_busy_by_stage(str(path), 3) is None  # a stage without a marker
    tasks = [(0, "F c0 m0", 0.0, 92e-6), (1, "F c1 m0", 0.0, 20e-6), (1, "B c1 m0", 1.0, 1.00001)]
    assert pipeline_gpu.idle_of([46.0, 15.0], tasks, 2) == pytest.approx([0.5, 0.5])
