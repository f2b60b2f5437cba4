"""What training and evaluation print and draw: smoothed curves, the eval table, the summary."""

from __future__ import annotations

import io
import math

from rlvr.summary import Summary, print_summary
from rlvr.train.evaluation import format_table
from rlvr.train.logging import _panel, centred_mean, plot_metrics
from rlvr.types import Rollout


def test_smoothed_curve_is_labelled_in_the_legend(tmp_path) -> None:
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    _panel(ax, "loss/train", [(float(i), 1.0 / (i + 1)) for i in range(50)])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["logged", "centred mean of 5"]
    short = Figure().add_subplot()
    _panel(short, "loss/train", [(float(i), 1.0) for i in range(5)])
    assert short.get_legend() is None  # too few points to smooth: one curve, no legend
    rows = [{"step": float(i), "loss/train": 1.0 / (i + 1)} for i in range(40)]
    assert [p.name for p in plot_metrics(rows, ["step", "loss/train"], tmp_path)] == ["loss.png", "overview.png"]


def test_smoothed_curve_does_not_lag_a_falling_loss() -> None:
    # An SFT-like loss: fast exponential decay plus alternating noise, 200 steps.
    steps = 200
    true = [2.0 * math.exp(-i / 15) + 0.1 for i in range(steps)]
    noisy = [t + (0.05 if i % 2 else -0.05) for i, t in enumerate(true)]
    smooth, window = centred_mean(noisy)
    assert window == 21
    worst = max(abs(s - t) for s, t in zip(smooth, true))
    assert worst < 0.1  # 0.083; the old EMA (beta 0.9) was 0.52 behind at step 10, 0.53 at worst
    ema, acc = [], noisy[0]
    for v in noisy:
        acc = 0.9 * acc + 0.1 * v
        ema.append(acc)
    assert max(abs(e - t) for e, t in zip(ema, true)) > 4 * worst
    # A straight line is returned unchanged (no lag at all), ends included.
    line = [3.0 - 0.01 * i for i in range(steps)]
    assert max(abs(a - b) for a, b in zip(centred_mean(line)[0], line)) < 1e-9


def test_eval_table_headers_stay_apart_with_long_names() -> None:
    rows = [
        ("opponent=random,size=large_board", {"reward": 0.5, "first_answer_correct_pct": 75.0, "win_pct": 10.0}),
        ("default", {"reward": 1.0, "win_pct": 100.0}),
    ]
    header, first, second = format_table(rows).splitlines()
    assert header.split() == ["set", "reward", "first_answer_correct_pct", "win_pct"]
    assert first.split() == ["opponent=random,size=large_board", "0.500", "75.000", "10.000"]
    assert second.split() == ["default", "1.000", "nan", "100.000"]
    # Every column ends where its header ends: numbers sit under their names.
    for name, value in zip(header.split()[1:], first.split()[1:]):
        assert header.index(name) + len(name) == first.index(value) + len(value)


def test_summary_title_does_not_wrap_and_says_wall_time() -> None:
    from rich.console import Console

    summary = Summary(1, {"right": 1.0})
    for i in range(3):
        summary.add(Rollout(task_id=f"t{i}", rollout_index=0, seed=0, prompt=[], rewards={"right": 1.0}, reward=1.0))
    out = io.StringIO()
    title = "reverse_text / an-organisation/a-rather-long-model-name-that-is-wider-than-the-table"
    print_summary(summary, title=title, elapsed_s=2.0, console=Console(file=out, width=100))
    text = out.getvalue()
    assert f"{title}: 3 rollouts of 3 tasks\n" in text  # one line, not wrapped at the table width
    assert "wall seconds per rollout (overlapping)" in text and "seconds / rollout" not in text
    assert "time: 2.0 s (1.50 rollouts/s)" in text
