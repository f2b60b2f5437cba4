"""Exact curves of RL runs: lost games over the whole tree at each exact evaluation.

    python experiments/tictactoe/curves.py add CSV RUN_DIR SEED OPPONENT VARIANT [FIRST_STEP]  # append a run's points
    python experiments/tictactoe/curves.py plot CSV PNG [MATCH [SEEDS [COLUMN [TARGET]]]]        # draw every run

`add` reads RUN_DIR/metrics.csv (written by `rlvr train --eval-exact`). A later RL phase passes
FIRST_STEP, the step the phase before it ended at, and its steps are counted from there; a point
the CSV already has for that line and step (a phase's step 0, when it continues the same line)
is not added again.
`plot` draws one panel
per seed, one line per (opponent, variant), or only the lines whose "opponent, variant" label
contains MATCH (and only the seeds that have one; with SEEDS, only the seeds whose name starts
with it, e.g. `weak`, or with one of several comma-separated prefixes, e.g. `weak_w3,weak_l`); a
panel whose counts span more than 10x (the weak start, or one run's collapse) is drawn linear up
to 10 and logarithmic above, so 0 stays visible. COLUMN draws another of the CSV's columns instead
of the lost games, e.g. `random_win_pct` (exact wins vs random, %) or `optimal_draw_pct`. TARGET, a
number, draws that value as a grey dashed line in every panel (e.g. 90 for the weak start's wins).
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from typing import Any

FIELDS = ["seed", "opponent", "variant", "step", "lost_games", "rejected_move_games", "random_win_pct",
          "random_loss_pct", "optimal_draw_pct", "optimal_loss_pct"]  # fmt: skip
SOURCE = {"lost_games": "exact/beaten_games", "rejected_move_games": "exact/rejected_move_games",
          "random_win_pct": "exact/random/win_pct", "random_loss_pct": "exact/random/loss_pct",
          "optimal_draw_pct": "exact/optimal/draw_pct", "optimal_loss_pct": "exact/optimal/loss_pct"}  # fmt: skip

CURRENT = "random replies, then p = 0"  # the recipe before restarts: drawn in black
RESTARTS = "restarts"  # lines whose opponent names it (training with --restart-frac): drawn in red
EVERY_POINT = "every later move"  # restarts from every later move (--restart-points all): in purple
WALK_BACK = "walk back"  # restarts that walk back from a lost game's last move (backtrack): in green
GREEDY = "greedy probes"  # the walk back, restarting greedy probe games too (--restart-greedy): in orange
COVER = "at 4 random replies"  # greedy probes, a share at 4 random replies (plan cover; in the variant): teal
CONTINUED = "; continued:"  # a run continued from another's kept model, on another machine (in the variant): brown
BELOW = "restarts below 0.65"  # plan cover restarting drawn games with a rejected move too: navy, solid
MIX = "then p in [0, 0.7]"  # plan mix: the BELOW recipe against a mix of opponents (in the opponent): crimson
AGAIN = "again"  # a BELOW run repeated on seeds that have another (in the variant): navy, dashed
HABIT = "SFT on teacher_centre"  # plan habit: the BELOW recipe from SFT on policy:teacher_centre: goldenrod
LIMIT = "SFT on the limit player"  # plan limit: SFT on policy:limit, then RL (in the variant): deep sky blue
CUT = "cut at step"  # a run its machine was lost under (in the variant): dashed
TITLES = {
    "weak": "weak start (200 games)",
    "weak1": "weak start, seed 1 (200 games)",
    "weak2": "weak start, plan given, SFT seed 0",
    "weak_s1": "weak start, plan given3, SFT seed 1",
    "weak_s2": "weak start, plan given3, SFT seed 2",
    "weak_g1": "weak start, plan given4, SFT seed 1",
    "weak_g2": "weak start, plan given4, SFT seed 2",
    "weak_w1": "weak start, plan weakwins, SFT seed 1",
    "weak_w2": "weak start, plan weakwins, SFT seed 2",
    "weak_w3": "weak start, plan weakwins2, SFT seed 2",
    "weak_w4": "weak start, plan weakwins3, SFT seed 3",
    "weak_l2": "weak start on the limit player, SFT seed 2",
    "weak_l3": "weak start on the limit player, SFT seed 3",
    "weak_w5": "weak start, plan weakwins2, SFT seed 4",
    "weak_w6": "weak start, plan weakwins2, SFT seed 4 again",
    "weak_w7": "weak start, plan weakwins2, SFT seed 2 again",
    "weak_w8": "weak start, 150 + 100 steps, SFT seed 2, third",
    "weak_t2": "weak start, seed 2, three a GPU (2026-12-04)",
    "weak_t3": "weak start, seed 3, three a GPU (2026-12-04)",
    "weak_t4": "weak start, seed 4, three a GPU (2026-12-04)",
    "shipped": "RL 2, 3 and 4 of the shipped model",
}


def panel_title(seed: str) -> str:
    """A panel's title: the seed's entry in TITLES, else "seed N" for a seed named sN, else the name."""
    if seed in TITLES:
        return TITLES[seed]
    return f"seed {seed[1:]}" if seed[:1] == "s" and seed[1:].isdigit() else f"seed {seed}"


def add(table: Path, run: Path, seed: str, opponent: str, variant: str, first_step: int = 0) -> int:
    for label in (seed, opponent, variant):  # checked before the table is touched
        if not label.strip() or not label.isprintable():  # (lone surrogates and newlines are not)
            sys.exit(f"a line's seed, opponent and variant must be printable text, got {label!r}")
    new = not table.exists()
    have: set[tuple[str, str, str, int]] = set()
    if not new:
        _cut_torn_tail(table)  # else the first row appended would run on from it, and be lost with it
        with table.open() as f:
            have = {(r["seed"], r["opponent"], r["variant"], int(r["step"])) for r in _whole_rows(f)}
    rows = []
    with (run / "metrics.csv").open() as f:
        for r in csv.DictReader(f):
            found = [_number(r.get(key)) for key in ("step", *SOURCE.values())]
            values = [v for v in found if v is not None]
            if len(values) < len(found):  # no exact evaluation at this step, or a torn line
                continue
            step = first_step + int(values[0])
            if (seed, opponent, variant, step) in have:
                continue
            row: dict[str, Any] = {"seed": seed, "opponent": opponent, "variant": variant, "step": step}
            for name, value in zip(SOURCE, values[1:]):
                row[name] = int(value) if name.endswith("games") else round(value, 2)
            rows.append(row)
    with table.open("a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def _cut_torn_tail(table: Path) -> None:
    """Cut what follows the last newline: the part row an `add` killed mid-append left."""
    data = table.read_bytes()
    if data and not data.endswith(b"\n"):
        with table.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _whole_rows(f: Any) -> list[dict[str, str]]:
    """The table's rows, less a torn one (an `add` killed mid-append leaves its last row short)."""
    return [
        r
        for r in csv.DictReader(f)
        if all(r.get(k) for k in ("seed", "opponent", "variant"))
        and None not in (_number(r.get("step")), _number(r.get("lost_games")))
    ]


def _number(text: str | None) -> float | None:
    """A finite number, or None (empty, missing, unparsable, NaN or infinite)."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def select(table: Path, match: str = "", seeds_from: str = "") -> list[dict[str, str]]:
    """The table's whole rows whose "opponent, variant" contains `match`, of the seeds whose name
    starts with `seeds_from` (or with one of its comma-separated prefixes)."""
    prefixes = tuple(x for x in seeds_from.split(",") if x) or ("",)  # (a stray comma adds no "every seed")
    with table.open() as f:
        return [
            r for r in _whole_rows(f) if match in f"{r['opponent']}, {r['variant']}" and r["seed"].startswith(prefixes)
        ]


DASHES = ("-", "--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)))  # one family's lines, in turn


def line_styles(lines: list[tuple[str, str]], palette: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Colour and dash of each (opponent, variant) line: a named family's colour, and a dash that
    tells its lines apart; the lines of no family take `palette`'s colours in turn."""
    styles: dict[tuple[str, str], dict[str, Any]] = {}
    for colour, picked in (
        ("black", [x for x in lines if x[0] == CURRENT]),
        ("red", [x for x in lines if RESTARTS in x[0] and EVERY_POINT not in x[0] and WALK_BACK not in x[0]]),
        ("purple", [x for x in lines if EVERY_POINT in x[0]]),
        ("green", [x for x in lines if WALK_BACK in x[0] and GREEDY not in x[0]]),
        ("darkorange", [x for x in lines if GREEDY in x[0] and COVER not in x[1] and CONTINUED not in x[1]]),
        ("saddlebrown", [x for x in lines if CONTINUED in x[1]]),
        ("teal", [x for x in lines if COVER in x[1] and BELOW not in x[1]]),
    ):
        styles.update({x: {"color": colour, "lw": 2.2, "ls": DASHES[i % len(DASHES)]} for i, x in enumerate(picked)})
    styles.update({x: {"color": "navy", "lw": 2.2} for x in lines if BELOW in x[1]})  # its seeds and weak start
    styles.update({x: {"color": "navy", "lw": 2.2, "ls": DASHES[1]} for x in lines if BELOW in x[1] and AGAIN in x[1]})
    styles.update({x: {"color": "crimson", "lw": 2.2} for x in lines if BELOW in x[1] and MIX in x[0]})
    habit = [x for x in lines if HABIT in x[1]]
    styles.update({x: {"color": "goldenrod", "lw": 2.2, "ls": DASHES[1 if CUT in x[1] else 0]} for x in habit})
    limit = [x for x in lines if LIMIT in x[1]]  # the recipe solid, against the mix dashed
    styles.update({x: {"color": "deepskyblue", "lw": 2.2, "ls": DASHES[1 if MIX in x[0] else 0]} for x in limit})
    faster = [x for x in lines if BELOW in x[1] and "lr " in x[1]]  # the same at other learning rates
    styles.update({x: {"color": "navy", "lw": 2.2, "ls": DASHES[1 + i % 3]} for i, x in enumerate(faster)})
    rest = [x for x in lines if x not in styles]
    styles.update({x: {"color": palette[i % len(palette)]} for i, x in enumerate(rest)})
    return styles


YLABEL = {"lost_games": "lost games over the whole tree", "rejected_move_games": "games with a rejected move",
          "random_win_pct": "wins vs random, % (exact)", "random_loss_pct": "losses vs random, % (exact)",
          "optimal_draw_pct": "draws vs optimal, % (exact)", "optimal_loss_pct": "losses vs optimal, % (exact)"}  # fmt: skip


def plot(
    table: Path, out: Path, match: str = "", seeds_from: str = "", column: str = "lost_games", target: str = ""
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if column not in YLABEL:
        sys.exit(f"no column {column!r} to draw; one of {', '.join(YLABEL)}")
    level = _number(target)
    if target and level is None:
        sys.exit(f"TARGET must be a finite number, got {target!r}")
    rows = [r for r in select(table, match, seeds_from) if _number(r.get(column)) is not None]
    if not rows:
        sys.exit(f"no line of {table} matches {match!r} with a seed starting {seeds_from!r}")
    seeds = sorted({r["seed"] for r in rows}, key=lambda s: (s == "shipped", s.startswith("weak"), s))
    lines = sorted({(r["opponent"], r["variant"]) for r in rows})
    styles = line_styles(lines, [plt.get_cmap("tab20")(i) for i in range(20)])
    longest = max(len(f"{o}, {v}") for o, v in lines)  # about 0.065 inches a character at 8 points:
    columns = 2 if 2 * 0.065 * longest + 1 <= 4.2 * len(seeds) else 1  # two columns only where they fit
    legend_in = 0.2 * ((len(lines) + columns - 1) // columns) + 0.4  # inches below the panels
    width = max(4.2 * len(seeds), 0.065 * longest + 0.8)  # wide enough for one column of the legend
    fig, axes = plt.subplots(1, len(seeds), figsize=(width, 3.6 + legend_in), squeeze=False)
    handles: dict[str, Any] = {}
    for ax, seed in zip(axes[0], seeds, strict=True):
        counts = [float(r[column]) for r in rows if r["seed"] == seed]
        for line in lines:
            points = sorted(
                (int(r["step"]), float(r[column]))
                for r in rows
                if (r["opponent"], r["variant"]) == line and r["seed"] == seed
            )
            if points:
                label = f"{line[0]}, {line[1]}"
                (handles[label],) = ax.plot(*zip(*points, strict=True), marker="o", ms=3, **styles[line])
        if level is not None:
            handles[f"target: {level:g}"] = ax.axhline(level, color="grey", ls="--", lw=1)
        ax.set_title(panel_title(seed))
        ax.set_xlabel("RL step (0 = SFT model)")
        if column.endswith("_games") and max(counts) > 10 * max(min(counts), 1):
            ax.set_yscale("symlog", linthresh=10)
            ticks = [t for t in (0, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= 1.2 * max(counts)]
            ax.set_yticks(ticks, [str(t) for t in ticks])  # (symlog alone labels only the powers of 10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(YLABEL[column])
    labels = sorted(handles)
    fig.legend([handles[k] for k in labels], labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, legend_in / (3.6 + legend_in), 1, 1))
    part = out.with_name(out.name + ".part")  # a kill mid-write keeps the last whole figure
    fig.savefig(part, dpi=120, format=out.suffix.lstrip(".") or "png")
    part.replace(out)


if __name__ == "__main__":
    if len(sys.argv) in (7, 8) and sys.argv[1] == "add":
        first = int(sys.argv[7]) if len(sys.argv) == 8 else 0
        seed, opponent, variant = sys.argv[4:7]
        print(f"{add(Path(sys.argv[2]), Path(sys.argv[3]), seed, opponent, variant, first)} points added")
    elif len(sys.argv) in (4, 5, 6, 7, 8) and sys.argv[1] == "plot":
        plot(Path(sys.argv[2]), Path(sys.argv[3]), *sys.argv[4:])
    else:
        sys.exit(__doc__)
