"""rrfp.simulate and rrfp.schedule, `rrfp simulate` and `rrfp schedule show` as functions: a
replayed trace's ordering and step as the command takes them, and their arguments checked as
Pipeline's are (a wrong type is a TypeError naming the argument, never pybind's signature)."""
import gzip
import json
import os
import pathlib
import re
import signal
import threading
import time

import numpy
import pytest

import rrfp

SHAPE = dict(pp=4, microbatches=16)


def recorded_with_ordered_forwards(tmp_path):
    """A step recorded with ordered forwards (a batch-norm model's), whose replay under the
    adaptive rule, which reorders forwards, differs with them and without."""
    rec = rrfp.simulate(**SHAPE, hint="bfw", policy="ready", ordered_forwards=True,
                        workload="multimodal", seed=2)
    path = tmp_path / "ordered.json"
    rec.save_trace(path)
    return path


def test_a_trace_named_gz_is_gzip_and_reads_back(tmp_path):
    # It was plain JSON under a .gz name: gzip.open refused it.
    rec = rrfp.simulate(**SHAPE, hint="bfw", policy="ready", workload="language")
    path = tmp_path / "t.json.gz"
    rec.save_trace(path)
    with gzip.open(path, "rt") as f:
        assert json.load(f)["traceEvents"]
    assert rrfp.simulate(**SHAPE, hint="bfw", policy="ready", replay=str(path)).makespan == \
        rec.makespan


def adaptive(**kwargs):
    return rrfp.simulate(**SHAPE, hint="adaptive", policy="ready", **kwargs).makespan


def test_the_build_type_is_named():
    # What a benchmark states beside its numbers: CMake's build type, never empty.
    assert rrfp.build_type in ("Release", "Debug", "RelWithDebInfo", "MinSizeRel")


def test_a_replay_takes_the_ordering_its_trace_recorded_as_the_command_does(tmp_path):
    # rrfp.simulate replayed it with the forwards free, as `rrfp simulate --replay` no longer
    # does: a gain rrfp, held to the recorded ordering, could not reach.
    path = recorded_with_ordered_forwards(tmp_path)
    held, free = adaptive(replay=str(path), ordered_forwards=True), \
        adaptive(replay=str(path), ordered_forwards=False)
    assert held != free, "the shape no longer tells the orderings apart"
    assert adaptive(replay=str(path)) == held
    assert adaptive(replay=path, step=0) == held  # a path object, and the step by number


def test_a_step_the_trace_lacks_is_named(tmp_path):
    path = recorded_with_ordered_forwards(tmp_path)
    with pytest.raises(ValueError, match="has no step 3; it has 0"):
        adaptive(replay=path, step=3)
    with pytest.raises(ValueError, match="step: None .* or a whole number"):
        adaptive(replay=path, step=-2)
    with pytest.raises(ValueError, match="step: is about a replayed trace; give replay="):
        adaptive(step=0)


def test_a_replay_takes_the_traces_mapping_and_message_latency_as_the_command_does(tmp_path):
    # Neither was taken: the command's --trace-format and --message-us had no keyword.
    path = recorded_with_ordered_forwards(tmp_path)
    assert adaptive(replay=path, trace_format="rrfp") == adaptive(replay=path)
    with pytest.raises(ValueError, match="megatron"):
        adaptive(replay=path, trace_format="megatron")
    # A recording that times no message (a CSV without send_us): each takes `message_us`. At
    # P=2, M=1, 1 ms a task, F c0, F c1, B c1, B c0 in a chain with two messages between.
    untimed = tmp_path / "untimed.csv"
    untimed.write_text("stage,chunk,microbatch,kind,duration_us\n" + "".join(
        f"{c},{c},0,{k},1000\n" for c in (0, 1) for k in "FB"))
    one = dict(replay=untimed, pp=2, microbatches=1, split_backward="off", hint="1f1b",
               policy="fixed")
    assert rrfp.simulate(**one).makespan == pytest.approx(4e-3)
    assert rrfp.simulate(**one, message_us=500).makespan == pytest.approx(5e-3)
    with pytest.raises(ValueError, match="message_us: must be between 0 and 1e9 us, got -1"):
        rrfp.simulate(**one, message_us=-1)
    with pytest.raises(TypeError, match="message_us: microseconds as a number, or None"):
        rrfp.simulate(**one, message_us="5")
    for name, value in (("trace_format", "rrfp"), ("message_us", 5)):
        with pytest.raises(ValueError, match=f"{name}: is about a replayed trace"):
            adaptive(**{name: value})


def test_a_tp_protocol_at_one_rank_a_stage_is_refused():
    # Taken and ignored, as the command refuses it: one rank has nothing to coordinate.
    with pytest.raises(ValueError, match="tp_protocol: .* at tp=1 a stage has one rank"):
        rrfp.simulate(pp=2, microbatches=2, hint="1f1b", tp_protocol="agree")
    assert rrfp.simulate(pp=2, microbatches=2, hint="1f1b", tp=2, tp_protocol="agree").makespan > 0


@pytest.mark.parametrize("function", [rrfp.simulate, rrfp.schedule])
def test_a_keyword_neither_takes_is_named(function):
    # pybind's refusal listed every signature and named no argument.
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'micro_batches'; "
                                        "it takes .*microbatches"):
        function(micro_batches=4)


@pytest.mark.parametrize("call,match", [
    (lambda: rrfp.simulate(ordered_forwards="yes"), "ordered_forwards: True, False or None"),
    (lambda: rrfp.simulate(replay=3), "replay: a trace's or a CSV's path, got int 3"),
    (lambda: rrfp.simulate(policy=None), r"policy: a name \(str\), got NoneType"),
    (lambda: rrfp.schedule(pp=True), "pp: a whole number .* got bool True"),
    (lambda: rrfp.schedule(microbatches=True), "microbatches: a whole number .* got bool True"),
    (lambda: rrfp.schedule(hint=None), "hint: a schedule's name or rule"),
    # Before the replay they would need: an array met "the truth value of an array is ambiguous".
    (lambda: rrfp.simulate(step=numpy.array([1, 2])), "step: None .* got ndarray"),
    (lambda: rrfp.simulate(step=1.5), "step: None .* got float 1.5"),
    (lambda: rrfp.simulate(message_us=True), "message_us: microseconds as a number"),
])
def test_arguments_of_the_wrong_type_are_named(call, match):
    # pp=True was taken as 1; a path object or None fell to pybind's signature dump.
    with pytest.raises(TypeError, match=match):
        call()


def test_none_is_an_optional_argument_not_given():
    # trace_format, step and message_us took None for their default, and these three raised
    # TypeError for it.
    want = rrfp.simulate(pp=2, microbatches=4, hint="1f1b", policy="fixed").makespan
    assert rrfp.simulate(pp=2, microbatches=4, hint="1f1b", policy="fixed", replay=None,
                         workload_file=None, tp_protocol=None).makespan == want


def test_schedule_takes_a_hint_file_as_a_path_object(tmp_path):
    path = tmp_path / "h.txt"
    stages = rrfp.schedule(hint="1f1b", pp=2, microbatches=4)
    path.write_text("".join(f"stage {s}: " + " ".join(f"{k}{c}:{mb}" for k, c, mb in tasks) + "\n"
                            for s, tasks in enumerate(stages)))
    assert rrfp.schedule(hint=path, pp=2, microbatches=4) == stages


@pytest.mark.parametrize("bad", [None, 3, 2.5])
def test_a_record_is_saved_to_a_path_or_refused(tmp_path, monkeypatch, bad):
    # str(path) wrote a file named "None" (or "3") in the working folder.
    monkeypatch.chdir(tmp_path)
    rec = rrfp.simulate(pp=2, microbatches=2)
    for save in (rec.save_trace, rec.save_svg):
        with pytest.raises(TypeError, match=r"path: a file's path \(str or a path object\)"):
            save(bad)
    assert list(pathlib.Path(tmp_path).iterdir()) == []
    for save in (rec.save_trace, rec.save_svg):  # it wrote a file named '-'
        with pytest.raises(ValueError, match="path: '-' is no standard output here"):
            save(b"-")
    assert list(pathlib.Path(tmp_path).iterdir()) == []
    rec.save_trace(pathlib.Path("t.json"))
    rec.save_svg(b"t.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.svg"]


def test_a_run_too_large_for_the_memory_is_refused_before_it_starts(monkeypatch):
    # As the CLI refuses it: rrfp.simulate ran such a run until std::bad_alloc, or past the
    # memory RRFP_MEMORY_LIMIT allows; each stage's own state counts beside its tasks.
    monkeypatch.setenv("RRFP_MEMORY_LIMIT", "64M")
    with pytest.raises(MemoryError, match="simulate: 200000 tasks: about 183 MB of memory"):
        rrfp.simulate(pp=100000, microbatches=1, hint="bf")
    with pytest.raises(MemoryError, match="schedule: 2097152 tasks: .* lower `pp` or "
                                          "`microbatches`$"):
        rrfp.schedule(hint="1f1b", pp=1024, microbatches=1024)
    assert rrfp.simulate(pp=4, microbatches=8, hint="bf") is not None
    # An agree round's proposals grow as T^2 a task: counted as a leader's (about 50 MB) this
    # run passed, and took 185 MB and 42 s.
    with pytest.raises(MemoryError, match="simulate: 262144 tasks: about 251 MB of memory and "
                                          "67 s of work"):
        rrfp.simulate(pp=8, microbatches=32, tp=512, tp_protocol="agree", hint="bf")
    # A limit that is no size is a ValueError (it came as the run's MemoryError).
    monkeypatch.setenv("RRFP_MEMORY_LIMIT", "abc")
    with pytest.raises(ValueError, match="RRFP_MEMORY_LIMIT: 'abc' is not a size"):
        rrfp.simulate(pp=4, microbatches=8, hint="bf")


def test_a_record_refuses_pickling_naming_to_dict():
    import copy
    import pickle
    rec = rrfp.simulate(pp=2, microbatches=4, hint="bf")
    for copy_it in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=r"keep record.to_dict\(\)"):
            copy_it(rec)
    assert copy.copy(rec).makespan == rec.makespan
    assert pickle.loads(pickle.dumps(rec.to_dict())) == rec.to_dict()


def test_a_file_named_in_other_bytes_than_utf8_is_shown_with_replacements(tmp_path):
    # A hint file named in Latin-1 put its bytes in the record's label: repr, label and table
    # raised UnicodeDecodeError and to_dict a RuntimeError; errors naming such a file came back
    # with no message at all.
    folder = os.fsencode(tmp_path)
    hint = folder + b"/plan\xff.txt"
    with open(hint, "w") as f:
        f.write("stage 0: F0:0 F0:1 F0:2 F0:3 B0:0 B0:1 B0:2 B0:3\n"
                "stage 1: F1:0 B1:0 F1:1 B1:1 F1:2 B1:2 F1:3 B1:3\n")
    rec = rrfp.simulate(pp=2, microbatches=4, hint=hint, policy="fixed")
    assert "plan\ufffd.txt" in rec.label
    assert "plan\ufffd.txt" in repr(rec)
    assert "plan\\xff.txt" in rec.table()  # the table's rows show it as the CLI's do
    assert "plan\ufffd.txt" in json.dumps(rec.to_dict(), ensure_ascii=False)
    with pytest.raises(FileNotFoundError, match="nothing\ufffd.txt. does not exist"):
        rrfp.simulate(pp=2, microbatches=4, hint=folder + b"/nothing\xff.txt")
    # As Python's open() raises them (they were ValueErrors).
    with pytest.raises(FileNotFoundError, match="`workload_file`: .* does not exist"):
        rrfp.simulate(pp=2, microbatches=4, workload_file=folder + b"/none.json")
    with pytest.raises(IsADirectoryError, match="`workload_file`: .* is a directory, not a file"):
        rrfp.simulate(pp=2, microbatches=4, workload_file=folder)
    with pytest.raises(OSError, match="cannot be written: No such file or directory"):
        rec.save_trace(folder + b"/none\xff/t.json")


def test_a_replay_refuses_what_it_would_ignore_as_the_command_does(tmp_path):
    # A workload preset other than jitter, a workload file, or a path of '' were taken and
    # ignored with a replay (the command refuses each); a workload file's run was named after
    # the preset.
    path = recorded_with_ordered_forwards(tmp_path)
    with pytest.raises(ValueError, match="`workload`: with `replay` .* only a jitter preset "
                                         "applies .* got 'language'"):
        adaptive(replay=path, workload="language")
    assert adaptive(replay=path, workload="jitter:J2") != adaptive(replay=path)
    # A seed without jitter to seed was taken and changed nothing; with jitter it draws.
    with pytest.raises(ValueError, match="`seed`: a `replay`'s durations are measured, and "
                                         "nothing is drawn to seed"):
        adaptive(replay=path, seed=7)
    assert adaptive(replay=path, workload="jitter:J2", seed=7) != \
        adaptive(replay=path, workload="jitter:J2", seed=8)
    wf = tmp_path / "w.json"
    wf.write_text('{"forward_us": 500}')
    with pytest.raises(ValueError, match="`workload_file`: with `replay` .* also sets "
                                         "forward_us, which the replay would ignore"):
        adaptive(replay=path, workload_file=str(wf))
    wf.write_text('{"calibration": {}}')
    with pytest.raises(ValueError, match="`workload_file`: with `replay` .* sets none"):
        adaptive(replay=path, workload_file=str(wf))
    wf.write_text('{"forward_us": 500}')
    # Named with the preset it overrides where it names none (the name hid which lay under it).
    assert rrfp.simulate(**SHAPE, workload_file=str(wf)).to_dict()["workload"] == \
        "multimodal + " + str(wf)
    assert rrfp.simulate(**SHAPE, workload="language", workload_file=str(wf)).to_dict()[
        "workload"] == "language + " + str(wf)
    # A file's own preset replaced the one given beside it.
    wf.write_text('{"preset": "uniform"}')
    with pytest.raises(ValueError, match="`workload_file`: '.*' names a preset of its own "
                                         r"\('uniform'\), which replaces `workload` language"):
        rrfp.simulate(**SHAPE, workload="language", workload_file=str(wf))
    assert rrfp.simulate(**SHAPE, workload="uniform", workload_file=str(wf)) is not None
    for name in ("replay", "workload_file"):
        with pytest.raises(ValueError, match=f"{name}: '' names nothing"):
            rrfp.simulate(**{name: ""})
    with pytest.raises(ValueError, match='policy: one record holds one run'):
        rrfp.simulate(policy="both")


@pytest.mark.parametrize("name", ["simulate", "schedule"])
def test_the_keywords_checked_are_the_functions_own(name):
    # The wrapper's list of keywords is written by hand: one the binding gains or loses must
    # be added or dropped there too, or it is refused (or reaches pybind's signature dump).
    from rrfp import _rrfp
    signature = getattr(_rrfp, name).__doc__.splitlines()[0]
    bound = set(re.findall(r"(\w+): ", signature)) - {"workload_given", "seed_given"}  # its own
    listed = set(getattr(rrfp, f"_{name.upper()}_KEYWORDS"))
    assert bound == listed


def test_schedule_writes_a_list_hints_task_list_as_the_command_does(tmp_path):
    # `rrfp schedule show --out` as a keyword (the function had none): text, or JSON for a name
    # ending .json; each reads back as the same hint.
    order = rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out=tmp_path / "h.txt")
    assert (tmp_path / "h.txt").read_text() == (
        "rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=0\n"
        "stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n")
    rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out=str(tmp_path / "h.json"))
    assert json.loads((tmp_path / "h.json").read_text())["stages"][1] == [
        "F1:0", "B1:0", "F1:1", "B1:1"]
    for name in ("h.txt", "h.json"):
        assert rrfp.schedule(hint=tmp_path / name, pp=2, microbatches=2) == order
    with pytest.raises(ValueError, match="`out`: 'bf' is a rule hint, it has no task list"):
        rrfp.schedule(hint="bf", pp=2, microbatches=2, out=tmp_path / "bf.txt")
    with pytest.raises(OSError, match="No such file or directory"):
        rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out=tmp_path / "missing" / "h.txt")
    with pytest.raises(ValueError, match="out: '' names nothing"):
        rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out="")
    with pytest.raises(TypeError, match="out: a file's path"):
        rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out=3)
    # What the command refuses: it wrote a file named '-', a file 'zb-h1' that hint='zb-h1'
    # never reads back, and over the hint file it read.
    with pytest.raises(ValueError, match="out: '-' is no standard output here"):
        rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out="-")
    with pytest.raises(ValueError, match="out: 'zb-h1' is a built-in hint's name"):
        rrfp.schedule(hint="1f1b", pp=2, microbatches=2, out="zb-h1")
    before = (tmp_path / "h.txt").read_text()
    with pytest.raises(ValueError, match="is the hint file it would be written from"):
        rrfp.schedule(hint=tmp_path / "h.txt", pp=2, microbatches=2, out=tmp_path / "h.txt")
    assert (tmp_path / "h.txt").read_text() == before
    assert not (tmp_path / "bf.txt").exists()


def test_schedule_takes_ordered_forwards_as_the_command_does(tmp_path):
    # A list whose first stage runs m1's forward before m0's: fine, unless each chunk's
    # forwards must run in microbatch order, which the function could not ask for.
    path = tmp_path / "h.txt"
    path.write_text("stage 0: F0:1 F0:0 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n")
    assert rrfp.schedule(hint=path, pp=2, microbatches=2, ordered_forwards=False)[0][0] == (
        "F", 0, 1)
    with pytest.raises(ValueError, match="stage 0: task F c0 m1 comes before F c0 m0, which it "
                                         "waits for under `ordered_forwards` \\(each chunk's "
                                         "forwards in microbatch order"):
        rrfp.schedule(hint=path, pp=2, microbatches=2, ordered_forwards=True)
    with pytest.raises(TypeError, match="ordered_forwards: True, False or None"):
        rrfp.schedule(hint="bf", ordered_forwards="on")


@pytest.mark.parametrize("call", [
    lambda: rrfp.simulate(pp=100, microbatches=200, tp=100),
    lambda: rrfp.schedule(pp=300, microbatches=4000),
])
def test_ctrl_c_stops_a_long_call_within_it(call):
    # Heeded only once the call had ended (half a minute at TP 100); schedule held the GIL.
    start = time.monotonic()
    call()
    whole = time.monotonic() - start
    timer = threading.Timer(whole / 8, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        call()
    assert time.monotonic() - start < whole / 2, f"the whole call takes {whole:.1f} s"
    timer.join()


def test_schedule_refuses_a_built_in_hints_name_as_bytes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # b'gpipe' wrote a file that hint='gpipe' would not read
    with pytest.raises(ValueError, match="out: 'gpipe' is a built-in hint's name"):
        rrfp.schedule(hint="zb-h1", out=b"gpipe")
    assert list(tmp_path.iterdir()) == []


def test_a_built_in_hints_name_beside_a_file_of_it_warns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the built-in ran, the file passed over without a word
    (tmp_path / "gpipe").write_text("stage 0: F0:0 B0:0\n")
    with pytest.warns(UserWarning, match="hint='gpipe' runs the built-in hint, not the file"):
        rrfp.simulate(pp=2, microbatches=2, hint="gpipe", policy="fixed")
    with pytest.warns(UserWarning, match="give './gpipe' or a path object"):
        rrfp.schedule(hint="gpipe", pp=2, microbatches=2)
    with pytest.warns(UserWarning, match="hint=b'gpipe' runs the built-in hint"):
        rrfp.schedule(hint=b"gpipe", pp=2, microbatches=2)


def test_schedule_of_a_hint_file_takes_its_shape(tmp_path):
    # As `rrfp schedule show` does: the file was refused as written for pp=2, where the
    # default is pp=4.
    hint = tmp_path / "two.txt"
    hint.write_text("rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=0\n"
                    "stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 F1:1 B1:0 B1:1\n")
    assert rrfp.schedule(hint=hint) == [[("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)],
                                        [("F", 1, 0), ("F", 1, 1), ("B", 1, 0), ("B", 1, 1)]]
    with pytest.raises(ValueError, match="written for pp=2 but the run has pp=4"):
        rrfp.schedule(hint=hint, pp=4)  # given: the file must fit it
    # So does simulate, as `rrfp simulate --hint FILE` does.
    record = rrfp.simulate(hint=hint, policy="fixed", workload="uniform")
    assert sorted({stage for stage, *_ in record.tasks}) == [0, 1] and len(record.tasks) == 8
    with pytest.raises(ValueError, match="written for pp=2 but the run has pp=3"):
        rrfp.simulate(hint=hint, policy="fixed", pp=3)
    hint.write_text("rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=vshape split=0\n")
    with pytest.raises(ValueError, match="vshape, which needs vpp 2, but the run has vpp 3 "
                                         r"\(`vpp`\)"):
        rrfp.schedule(hint=hint, vpp=3)
    assert len(rrfp.schedule(hint="1f1b")) == 4  # a built-in's shape: the defaults
    # Too small to list the shape it names: refused before 2M tasks are built, as the command
    # refuses it (it was told "stage 1 has no line" a second later).
    hint.write_text("rrfp-hint 1 pp=1024 vpp=1 microbatches=1024 placement=loop split=0\n"
                    "stage 0: F0:0\n")
    with pytest.raises(ValueError, match="cannot list the 2097152 tasks of P=1024 V=1 M=1024"):
        rrfp.schedule(hint=hint)


def test_a_shape_whose_product_wraps_64_bits_is_a_value_error(tmp_path):
    # 2^22 x 2^21 x 2^21 = 2^64 wrapped to 0 in 64-bit integers: it passed the shape's cap and
    # the model's construction divided by zero, the interpreter killed by SIGFPE.
    wraps = "4194304 x 2097152 x 2097152 = 1.844674407370955e"
    with pytest.raises(ValueError, match=wraps):
        rrfp.simulate(pp=2**22, vpp=2**21, microbatches=2**21)
    with pytest.raises(ValueError, match=wraps):
        rrfp.schedule(hint="1f1b", pp=2**22, vpp=2**21, microbatches=2**21)
    header = tmp_path / "wrap.txt"
    header.write_text("rrfp-hint 1 pp=4194304 vpp=2097152 microbatches=2097152 placement=loop "
                      "split=0\nstage 0: F0:0\n")
    with pytest.raises(ValueError, match="= 1.844674407370955e"):
        rrfp.simulate(hint=str(header))


def test_a_path_with_a_null_byte_is_refused(tmp_path, monkeypatch):
    # The core opened the text up to the NUL: 'a\0junk' read or wrote the file 'a'.
    monkeypatch.chdir(tmp_path)
    rrfp.schedule(hint="zb-h1", pp=2, microbatches=4, out="h.txt")
    with pytest.raises(ValueError, match="hint: embedded null byte"):
        rrfp.simulate(hint="h.txt\0junk", policy="fixed")
    with pytest.raises(ValueError, match="replay: embedded null byte"):
        rrfp.simulate(replay=b"a\0junk", pp=2, microbatches=4)
    with pytest.raises(ValueError, match="out: embedded null byte"):
        rrfp.schedule(hint="1f1b", out="o\0junk")
    record = rrfp.simulate()
    for save in (record.save_trace, record.save_svg):
        with pytest.raises(ValueError, match="path: embedded null byte"):
            save("out\0junk")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.txt"]



def test_a_records_tasks_too_large_for_the_memory_are_refused(monkeypatch, tmp_path):
    # StepRecord.tasks builds a tuple a task (about 190 bytes) on each access: a record its run's
    # check let through needed 12.7 GB more there, unchecked.
    record = rrfp.simulate(pp=4, microbatches=1000, hint="bf")
    assert len(record.tasks) == 8000
    monkeypatch.setenv("RRFP_MEMORY_LIMIT", "1M")
    with pytest.raises(MemoryError, match=r"StepRecord.tasks: 8000 tuples: about 2 MB of memory.*"
                                          r": lower `pp`, `microbatches` or `tp`, or read the "
                                          r"record's table\(\) or json\(\) instead$"):
        record.tasks
    # So are its trace and SVG, before anything is written (written past the limit, twice it).
    for save, per_task in ((record.save_trace, "4 MB"), (record.save_svg, "3 MB")):
        path = tmp_path / "big"
        with pytest.raises(MemoryError, match=rf"StepRecord.{save.__name__}: 8000 tasks: about "
                                              rf"{per_task} of memory"):
            save(str(path))
        assert not path.exists()
