"""How a pipeline reads the launcher's whole numbers from the environment (process counts,
srun's tasks, a rank): decimal digits, blanks around them ignored, every variable alike; any
other value refused naming the variable, where int() named the value alone and a test of
str.isdigit() skipped a refusal that int() would have made. No process is started: the
variables are set on this one."""
import re

import pytest

from rrfp import _launch

_READ = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK",
         "MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_NUM_TASKS")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    # The tests' own run may be under a launcher (ctest from srun, say).
    for name in _READ:
        monkeypatch.delenv(name, raising=False)


def refused(name, value):
    """pytest.raises of the refusal naming `name` and its (shown) value."""
    return pytest.raises(ValueError, match=re.escape(f"environment variable {name}: {value!r}"))


def torch_env(monkeypatch, world):
    """torch.distributed's environment as another launcher than torchrun sets it."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", world)


@pytest.mark.parametrize("name", ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])
@pytest.mark.parametrize("value", ["abc", "4x", "+4", "1_000", "4.0", "\u0664", "\u00b2"])
def test_a_garbage_process_count_is_refused_naming_the_variable(monkeypatch, name, value):
    # int() took '+4', '1_000' and an Arabic-Indic four, and refused the rest naming only the
    # value; the superscript two passed str.isdigit() and then failed int().
    monkeypatch.setenv(name, value)
    with refused(name, value) as e:
        _launch.launched_transport(4, 1, None)
    assert "decimal digits" in str(e.value) and "mpirun" in str(e.value)


@pytest.mark.parametrize("name", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"])
def test_an_empty_value_is_refused_naming_the_variable(monkeypatch, name):
    # Set but empty is no count: int('') named nothing; srun's '' passed as no srun at all.
    monkeypatch.setenv(name, "")
    with refused(name, ""):
        _launch.launched_transport(1, 1, None)


def test_torchrun_world_size_in_exponent_form_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "1e3")
    with refused("WORLD_SIZE", "1e3") as e:
        _launch.launched_transport(2, 1, None)
    assert "torchrun" in str(e.value)


def test_torch_environment_of_garbage_is_refused_not_run_in_threads(monkeypatch):
    # A WORLD_SIZE that failed str.isdigit() left every process running the whole pipeline in
    # threads; RANK went unread (torch's int() named its value alone).
    torch_env(monkeypatch, "1e3")
    with refused("WORLD_SIZE", "1e3"):
        _launch.launched_transport(2, 1, None)
    torch_env(monkeypatch, "2")
    monkeypatch.setenv("RANK", "first")
    with refused("RANK", "first"):
        _launch.launched_transport(2, 1, None)


def test_a_rank_past_the_last_is_refused_naming_the_world_size(monkeypatch):
    # Its process failed in Gloo ("enforce fail ... rank < size. 2 vs 2") while the others
    # waited in the group's forming past every limit.
    torch_env(monkeypatch, "2")
    monkeypatch.setenv("RANK", "2")
    with refused("RANK", "2") as e:
        _launch.launched_transport(2, 1, None)
    assert "a rank below WORLD_SIZE=2 (decimal digits, 0 to 1)" in str(e.value)
    monkeypatch.setenv("RANK", "1")
    assert _launch.launched_transport(2, 1, None) == "c10d"
    # The store's port likewise (torch's int() named the value alone).
    for port in ("abc", "0", "65536"):
        monkeypatch.setenv("MASTER_PORT", port)
        with refused("MASTER_PORT", port) as e:
            _launch.launched_transport(2, 1, None)
        assert "a TCP port (decimal digits, 1 to 65535)" in str(e.value)
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert _launch.launched_transport(2, 1, None) == "c10d"


def test_blanks_around_a_count_are_ignored_alike_everywhere(monkeypatch):
    # int() took ' 4' and str.isdigit() did not: srun's several tasks and another launcher's
    # torch environment went unrefused, each process running the whole pipeline in threads.
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", " 4")
    with pytest.raises(ValueError, match="srun started 4 tasks"):
        _launch.launched_transport(2, 1, None)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1 ")
    assert _launch.launched_transport(2, 1, None) == "inproc"  # a step of one task
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS")
    torch_env(monkeypatch, " 4")
    with pytest.raises(ValueError, match="names 4 processes, but pp=2 x dp=1 needs 2"):
        _launch.launched_transport(2, 1, None)
    assert _launch.launched_transport(2, 2, None) == "c10d"
    monkeypatch.setenv("RANK", "\t3\n")
    assert _launch.launched_transport(4, 1, None) == "c10d"
    for name in ("MASTER_ADDR", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name)
    for key, name, want in (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "mpi"),
                            ("PMI_SIZE", "PMI_SIZE", "mpi"),
                            ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "c10d")):
        monkeypatch.setenv(key, "x")
        monkeypatch.setenv(name, " 4 ")
        assert _launch.launched_transport(4, 1, None) == want
        with pytest.raises(ValueError, match=r"started 4 process\(es\), but pp=2"):
            _launch.launched_transport(2, 1, None)
        monkeypatch.delenv(key)
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("name,value", [("PMI_SIZE", "-2"), ("OMPI_COMM_WORLD_SIZE", "0"),
                                        ("SLURM_STEP_NUM_TASKS", "-3"), ("WORLD_SIZE", "-4")])
def test_a_negative_or_zero_count_is_refused_naming_the_variable(monkeypatch, name, value):
    # mpirun's -2 came out as "mpirun started -2 process(es)", srun's -3 as no srun, and torch's
    # environment of -4 processes as none at all.
    if name == "WORLD_SIZE":
        torch_env(monkeypatch, value)
    monkeypatch.setenv(name, value)
    with refused(name, value) as e:
        _launch.launched_transport(1, 1, None)
    assert "1 to 2147483647" in str(e.value)


@pytest.mark.parametrize("value", ["2147483648", "9" * 40, "1" + "0" * 5000],
                         ids=["2**31", "40 nines", "5001 digits"])
def test_a_huge_count_is_refused_naming_the_variable_its_value_cut_short(monkeypatch, value):
    # int() took 40 nines as a count, and refused 5001 digits with a message of its own.
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", value)
    shown = value if len(value) <= 30 else value[:30] + "..."
    with refused("WORLD_SIZE", shown) as e:
        _launch.launched_transport(2, 1, None)
    assert len(str(e.value)) < 300
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    torch_env(monkeypatch, value)
    with refused("WORLD_SIZE", shown):
        _launch.launched_transport(2, 1, None)


def test_unset_variables_mean_what_they_meant(monkeypatch):
    # No launcher: threads. torchrun without WORLD_SIZE: one process. WORLD_SIZE alone, or
    # torch's environment of one process, is no job of several.
    assert _launch.launched_transport(2, 1, None) == "inproc"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert _launch.launched_transport(1, 1, None) == "c10d"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.setenv("WORLD_SIZE", "garbage, but no MASTER_ADDR or RANK")
    assert _launch.launched_transport(2, 1, None) == "inproc"
    torch_env(monkeypatch, "1")
    monkeypatch.setenv("RANK", "unread with one process")
    assert _launch.launched_transport(2, 1, None) == "inproc"
    assert _launch.launched_transport(2, 1, object()) == "c10d"  # a group: c10d, unread


def test_the_c10d_transport_outside_torchrun_is_a_value_error_as_mpi_is_outside_mpirun():
    # torch's "environment variable RANK expected" came as a RuntimeError naming the store at
    # "?:?"; the MPI transport outside mpirun says ValueError.
    import torch
    import rrfp
    chunks = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    with pytest.raises(ValueError, match=re.escape(
            "`transport` c10d: start the script under torchrun, or call "
            "torch.distributed.init_process_group first (RANK, WORLD_SIZE, MASTER_ADDR, "
            "MASTER_PORT not set; see docs/python.md)")):
        rrfp.Pipeline(chunks, torch.nn.functional.mse_loss, pp=2, microbatches=2,
                      transport="c10d")
    with pytest.raises(ValueError, match="`transport` mpi: start the script under mpirun"):
        rrfp.Pipeline(chunks, torch.nn.functional.mse_loss, pp=2, microbatches=2,
                      transport="mpi")
