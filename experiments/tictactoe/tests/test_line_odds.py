"""experiments/tictactoe/line_odds.py: each lost line's chance under the training opponent."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from pathlib import Path

import pytest
from exact_players import as_policy, blunders_once, exact
from rlvr_tictactoe import load_environment

from rlvr.engine import run_rollouts


def test_the_line_odds_script_gives_each_line_its_chance_under_the_training_opponent(tmp_path, capsys):
    """experiments/tictactoe/line_odds.py: over every game of a deterministic player the chances sum
    to 1, for several training opponents; the chance of the lost lines matches how often the
    player loses in training games the env itself deals and plays."""
    spec = importlib.util.spec_from_file_location(
        "odds", Path(__file__).parents[3] / "experiments" / "tictactoe" / "line_odds.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    result = exact(blunders_once)
    lines = [g.info["exact"]["moves"] for g in result.games]
    lost = [x for x, o in zip(lines, result.outcomes, strict=True) if o == "loss"]
    assert lost and all(x.startswith("O0.X1.") for x in lost)  # the one blunder: X1 after O0
    for ks, p, trap in (([0, 1, 2, 3, 4], 0.0, 1.0), ([4], 0.0, 1.0), ([0, 1, 2], 0.3, 0.5)):
        assert math.isclose(sum(script.line_odds(x, ks, p, trap) for x in lines), 1.0, abs_tol=1e-12), (ks, p, trap)
    chance = sum(script.line_odds(x, [0, 1, 2, 3, 4], 0.0, 1.0) for x in lost)
    env = load_environment(opponent="optimal", trap_prob=1.0, random_replies=4, num_tasks=1200)
    games = asyncio.run(run_rollouts(env, as_policy(blunders_once), env.tasks("train")))
    share = sum(g.rewards["loss"] == 1.0 for g in games) / len(games)
    sd = math.sqrt(chance * (1 - chance) / len(games))
    assert abs(share - chance) < 4 * sd, (share, chance)  # (the tasks are seeded: no flake)
    # the script on an exhaustive folder: each lost line, the total, and the fixed-k probes
    folder = tmp_path / "exact"
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"exact": {"beaten": lost, "games": len(lines)}}))
    assert script.main([str(folder), "--probe-k", "4", "--probes", "64"]) == 0
    printed = capsys.readouterr().out
    assert f"{len(lost)} lost lines of {len(lines)} games" in printed
    assert f"a greedy probe loses {100 * chance:.4f}% of games" in printed
    assert f"64 probes a step, {script.every(chance, 64)}" in printed
    # a weak player loses several a step: a count, not "one every 0 steps"
    assert script.every(0.0459, 64) == "2.9 lost a step" and script.every(0.001, 64) == "one lost every 16 steps"
    assert script.every(0.0, 64) == "none lost"
    # a plain eval, a torn metadata.json (a killed write), lines that are not games: one line, exit 2
    for name, text in (
        ("plain", '{"status": "complete"}'),
        ("torn", '{"exact": {"beaten": ["O0.X1'),
        ("surrogate", json.dumps({"exact": {"beaten": ["O0.X\ud800"], "games": 1}})),
        ("taken", json.dumps({"exact": {"beaten": ["O0.X0"], "games": 1}})),
        ("huge", json.dumps({"exact": {"beaten": ["O0." * 100_000], "games": 1}})),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metadata.json").write_text(text)
        assert script.main([str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a complete" in err and len(err) < 2_000, err
    assert script.main([str(tmp_path / "missing")]) == 2 and "not a complete" in capsys.readouterr().err
    for bad in (["--p", "nan"], ["--trap-prob", "2"], ["--probe-k", "6"], ["--probes", "0"]):
        with pytest.raises(SystemExit):
            script.main([str(folder), *bad])
