"""torch's CPU threads: chosen so that a busy machine is not oversubscribed, unless the person
chose; `RLVR_NUM_THREADS` overrides."""

from __future__ import annotations

import pytest

from rlvr.clients.cpu_threads import available_cores, choose_for_process, chosen_threads
from rlvr.errors import UsageError


def test_a_thread_a_core_with_passive_waiting_unless_the_person_chose() -> None:
    environ: dict[str, str] = {}
    threads = choose_for_process(environ)
    assert threads == min(8, available_cores())
    assert environ == {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    mine = {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "ACTIVE"}
    assert choose_for_process(mine) is None and mine == {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "ACTIVE"}
    assert chosen_threads({"MKL_NUM_THREADS": "2"}, cores=16) is None


@pytest.mark.parametrize("value", ["0", "-2", "two", ""])
def test_a_bad_override_is_one_line(value) -> None:
    with pytest.raises(UsageError, match="RLVR_NUM_THREADS must be a whole number of threads >= 1"):
        chosen_threads({"RLVR_NUM_THREADS": value})


def test_the_override_wins_and_reaches_an_imported_torch(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setenv("RLVR_NUM_THREADS", "1")
        assert choose_for_process() == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        monkeypatch.delenv("RLVR_NUM_THREADS")
        assert choose_for_process() is None and torch.get_num_threads() == 2  # the person's OMP_NUM_THREADS
    finally:
        torch.set_num_threads(before)


def test_the_cli_chooses_before_a_command_runs(monkeypatch, capsys) -> None:
    import os
    import sys

    from rlvr.cli import main

    torch = sys.modules.get("torch")  # (this process's torch gets the choice too: put back after)
    before = torch.get_num_threads() if torch is not None else None
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RLVR_NUM_THREADS", "1")
    try:
        assert main(["list"]) == 0
        assert (os.environ["OMP_NUM_THREADS"], os.environ["OMP_WAIT_POLICY"]) == ("1", "PASSIVE")
        monkeypatch.setenv("RLVR_NUM_THREADS", "many")
        capsys.readouterr()
        assert main(["list"]) == 0  # a command that loads no model is not stopped by it
        assert "note: RLVR_NUM_THREADS must be a whole number" in capsys.readouterr().err
        assert main(["eval", "reverse_text", "-m", "models/tictactoe-tiny", "-n", "1"]) == 1
        assert "error: RLVR_NUM_THREADS must be a whole number" in capsys.readouterr().err  # one that does is
    finally:
        if torch is not None:
            torch.set_num_threads(before)
