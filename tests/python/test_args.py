"""What the processes of a job compare of a hint: a hint file by its bytes, as the core reads
one (any file there but a hint's own name), a hint's name by itself."""
from rrfp import _launch


def test_a_hint_file_under_any_name_is_compared_by_its_bytes(tmp_path, monkeypatch):
    # A plan written to best.plan is a hint file to the core; its bytes went uncompared (only
    # names with a "/" or ending .txt/.json were), so processes whose copies differed ran
    # different schedules.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "best.plan").write_text("stage 0: F0:0 B0:0\n")
    (tmp_path / "bf").write_text("not read: bf is a hint's own name\n")
    compared, shown = _launch._compared("hint", "best.plan")
    assert compared.startswith("file ") and "sha256" in shown
    assert _launch._compared("hint", "bf") == ("'bf'", "'bf'")
    (tmp_path / "best.plan").write_text("stage 0: B0:0 F0:0\n")
    assert _launch._compared("hint", "best.plan")[0] != compared
