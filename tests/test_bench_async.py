"""benchmarks/bench_async.py: what it reads from a run's metrics (after the warm-up: the wait,
the ratios and the staleness; the last steps' reward; the reward against cumulative step seconds)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from loading import load_module

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # (it imports bench_tictactoe_step beside it)
bench = load_module(BENCHMARKS / "bench_async.py")


def test_summarize_reads_the_overlap_metrics_and_the_reward_against_wall_clock(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    header = "step,time/step,reward/mean,time/rollouts_wait,ratio/max,clip/frac,async/staleness\n"
    rows = ["0,,0.1,,,,", "1,2.0,0.2,0.0,1.0,0.0,0", "2,1.5,0.4,0.5,1.5,0.2,1", "3,1.0,0.6,0.1,2.5,0.4,1"]
    path.write_text(header + "\n".join(rows) + "\n")
    got = bench.summarize(path, skip=1, last=2)
    assert got["reward_vs_seconds"] == [[2.0, 0.2], [3.5, 0.4], [4.5, 0.6]]  # step 0 (no step time) left out
    assert got["time/step"] == 1.25 and got["time/rollouts_wait"] == pytest.approx(0.3)
    assert got["ratio/max"] == 2.0 and got["clip/frac"] == pytest.approx(0.3) and got["async/staleness"] == 1.0
    assert got["reward_last"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no step after step 3"):
        bench.summarize(path, skip=3)
