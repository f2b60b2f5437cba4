"""Where a greedy model gives up wins against the random opponent, exactly.

    python experiments/tictactoe/regret.py RUN [--top 12] [--by-symmetry] [--by-kind] [--claims] [--train-p 0.7 [--random-replies 4] [--trap-prob 1] [--unsure 0.9]]

RUN is an `rlvr eval tictactoe --exhaustive` folder (or its results.jsonl). The model's move
after every line it reaches is read from each game's record (`info["exact"]["moves"]`, the
accepted moves in order; the model's reply depends on the conversation, so lines, not boards, are
the keys; a game that timed out, every reply rejected, is a decision with no move, which gives up
all the wins its position held), and `rlvr_tictactoe.tree.win_rate_gaps` says, for each
decision, how much win rate against the uniform-random opponent it gives up against the best
move that still never loses (the policy whose exact rate is the 95.56% limit), weighted by how
often the random opponent leads there. For an unbeatable model the weighted gaps add up to its
distance from that limit.

With `--train-p P`, also what RL against the training opponent sees of each decision (O moves
first in half the games; k from 0 to `--random-replies`, uniformly; uniformly random replies
while O has fewer than k marks, then a random move with probability P, else a trap move with
probability `--trap-prob`, else any best move; the env's draws): "greedy at T 1", the chance
that the model samples its greedy reply there at temperature 1 (from the record's token
log-probabilities; 1 less it bounds how often a group tries another move); "reach", the
chance that one training game, the model playing greedily, gets there; and "reward gap", the
training reward (win 1, draw 0.5) the best never-losing move earns there over the model's
move, both followed by the best reply to that opponent, averaged over k as the line weighs it.

With `--by-symmetry`, the decisions grouped by their board up to the board's 8 symmetries
(rotations and reflections): the model's text policy can get one orientation of a position right
and another wrong, so a class shows how many of the orientations the model reaches it gets wrong,
and whether the lost points are one habit or many separate mistakes.

With `--by-kind`, the points given up split by what was on the board (`decision_kind`): a win
X could take at once and did not (blocking instead, or not), a threat to block, or a quiet
board, where the teacher that made the SFT data plays the centre, else a corner (bar its 10%
random moves): the model played that habit while only other moves were best, or another move;
or no move accepted at all (a timeout).
The split says whether the shortfall is a skill not learnt (wins left on the board) or a prior
that RL has not moved (the teacher's habit); each kind also names the openings (the games' first
two moves) that hold most of its decisions.

With `--claims`, whether the reasoning of the model's reply at each listed decision states the
board truly (`rlvr_tictactoe.game.claim_truth`: a line it wins on, a threat it blocks, or no
threat), and how many of all decisions state something false.

With `--unsure U` as well, what `rlvr train --restart-unsure U` restarts: every decision whose
greedy reply has a probability below U at T 1, however it scores, with its reach (here the
chance that one greedy probe game gets there) and its reward gap against the training opponent
(0 where the model's move is already the best reply to it), and how much of the probes' meetings
with such turns fall where a better move exists.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import sys
from collections import Counter
from pathlib import Path

from rlvr_tictactoe import tree
from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    Board,
    apply_move,
    claim_truth,
    habit_moves,
    legal_moves,
    winning_cells,
)
from rlvr_tictactoe.rewards import parse
from rlvr_tictactoe.tasks import game_outcome, reply_prob

from rlvr.errors import ResultsError
from rlvr.results import RunDir

Line = tuple[tuple[str, int], ...]
_STEP = re.compile(r"[XO][0-8]")  # one accepted move of an exact record: who, and the cell


def read_records(run: Path) -> tuple[dict[Line, int | None], dict[Line, float], dict[Line, str]]:
    """From one pass over the saved games: the model's move after each line (None where every
    reply was rejected and the game ended there, a timeout), the chance at
    temperature 1 of its recorded (greedy) reply there, exp of the sum of the reply's token
    log-probabilities, and the reply's text (the last two where no rejected move adds a turn).
    A torn last line (a killed run) is dropped by `RunDir`; a run without exact records, or whose
    games answer one line two ways, is refused."""
    policy: dict[Line, int | None] = {}
    odds: dict[Line, float] = {}
    texts: dict[Line, str] = {}
    for rollout in RunDir.open(run).read():
        record = rollout.info.get("exact")
        if not isinstance(record, dict) or not record.get("moves"):
            raise ResultsError(f"{run}: game {rollout.task_id} has no exact record (not an --exhaustive run?)")
        steps = [] if record["moves"] == tree.NO_MOVES else str(record["moves"]).split(".")
        if len(steps) > 9 or not all(_STEP.fullmatch(step) for step in steps):
            raise ResultsError(f"{run}: game {rollout.task_id} has no readable moves: {str(record['moves'])[:60]!r}")
        moves = [(step[0], int(step[1:])) for step in steps]
        mine = [i for i, (mark, _) in enumerate(moves) if mark == "X"]
        said = {tuple(moves[:i]): moves[i][1] for i in mine}
        if record.get("outcome") == "timeout" and (not moves or moves[-1][0] == "O"):  # X's turn, no move accepted
            said[tuple(moves)] = None
        for line, move in said.items():  # a greedy model answers a line one way in every game
            if policy.setdefault(line, move) != move:
                raise ResultsError(
                    f"{run}: game {rollout.task_id} plays {move} after {show(line)}, another game "
                    f"{policy[line]}: not one deterministic policy's run (two runs in one file?)"
                )
        if len(rollout.turns) == len(mine):  # one turn a move: each reply is that move's
            for i, turn in zip(mine, rollout.turns, strict=True):
                texts[tuple(moves[:i])] = turn.completion.text
                if turn.completion.logprobs:
                    total = sum(turn.completion.logprobs)  # (a hostile +1000 is no probability: NaN, no overflow)
                    odds[tuple(moves[:i])] = math.exp(total) if total <= 0 else math.nan
    return policy, odds, texts


def read_policy(run: Path) -> dict[Line, int | None]:
    """The model's move after each line of the saved games (`read_records`)."""
    return read_records(run)[0]


REWARD = {"win": 1.0, "draw": 0.5, "loss": 0.0}  # the training reward of an outcome (a timeout: a loss's)


@functools.cache
def value(board: Board, x_to_move: bool, k: int, p: float, trap: float) -> float:
    """The training reward (win 1, draw 0.5, loss 0) X can expect from `board` against the
    training opponent with k random replies, playing the best reply to it."""
    if (outcome := game_outcome(board)) is not None:
        return REWARD[outcome]
    if x_to_move:
        return max(value(apply_move(board, m, "X"), False, k, p, trap) for m in legal_moves(board))
    q = reply_prob(board, p, k)
    return sum(
        tree.reply_probability(board, c, q, trap) * value(apply_move(board, c, "O"), True, k, p, trap)
        for c in legal_moves(board)
    )


def board_after(line: Line) -> Board:
    """The board a line of moves leads to."""
    board: Board = EMPTY_BOARD
    for mark, cell in line:
        board = apply_move(board, cell, mark)
    return board


def line_worths(line: Line, ks: list[int], p: float, trap: float) -> tuple[float, dict[int, float]]:
    """A decision under the training opponent (see the module): its reach (the line's chance,
    averaged over k) and the training reward of each legal move there, each k weighing as often
    as it leads there; ({}) where no k leads there."""
    board = board_after(line)
    reaches = [tree.line_chance(line, k, p, trap) for k in ks]
    total = sum(reaches)
    if not total:
        return 0.0, {}
    worths = {
        m: sum(r * value(apply_move(board, m, "X"), False, k, p, trap) for r, k in zip(reaches, ks, strict=True))
        / total
        for m in legal_moves(board)
    }
    return total / len(ks), worths


def training_view(gap: tree.Gap, ks: list[int], p: float, trap: float) -> tuple[float, float]:
    """(reach, reward gap) of one decision: its best never-losing move's reward over the model's."""
    reach, worth = line_worths(gap.line, ks, p, trap)
    mine = REWARD["loss"] if gap.move is None else worth[gap.move]  # (no move: the game ends, a timeout)
    return (reach, max(worth[m] for m in gap.best) - mine) if worth else (0.0, math.nan)


def unsure_view(
    policy: dict[Line, int | None], odds: dict[Line, float], u: float, ks: list[int], p: float, trap: float
) -> list[tuple[Line, int | None, float, float, float]]:
    """(line, model's move, greedy probability, reach, reward gap) of each decision whose greedy
    reply has a probability below `u` at T 1 (no recorded probability: left out), most often
    reached first; the gap over every legal move (not only never-losing ones: against the
    training opponent the best reply is what the reward favours)."""
    rows = []
    for line, move in policy.items():
        sure = odds.get(line, math.nan)
        if move is None or not sure < u:  # (NaN: not recorded; no move: no reply to restart)
            continue
        reach, worth = line_worths(line, ks, p, trap)
        if worth:
            rows.append((line, move, sure, reach, max(worth.values()) - worth[move]))
    return sorted(rows, key=lambda row: -row[3])


def _symmetries() -> list[tuple[int, ...]]:
    """The board's 8 symmetries, each as the image of cells 0-8."""
    rotate = tuple((i % 3) * 3 + 2 - i // 3 for i in range(9))  # (row, col) -> (col, 2 - row)
    flip = tuple((i // 3) * 3 + 2 - i % 3 for i in range(9))  # (row, col) -> (row, 2 - col)
    out, m = [], tuple(range(9))
    for _ in range(4):
        out += [m, tuple(flip[c] for c in m)]
        m = tuple(rotate[c] for c in m)
    return out


SYMMETRIES = _symmetries()


def marks(line: Line) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The board after `line`: X's cells and O's, sorted."""
    return tuple(sorted(c for m, c in line if m == "X")), tuple(sorted(c for m, c in line if m == "O"))


def canonical(board: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The least image of `board` under the 8 symmetries: equal for boards that are one position."""
    return min(tuple(tuple(sorted(s[c] for c in cells)) for cells in board) for s in SYMMETRIES)  # type: ignore[return-value]


def symmetry_view(gaps: list[tree.Gap], policy: dict[Line, int | None]) -> list[tuple[float, int, int, int, tree.Gap]]:
    """Per position up to symmetry, largest first: (points given up, decisions, boards given up
    there, boards of that position the model reaches at all, the largest decision)."""
    reached: dict[tuple, set[tuple]] = {}
    for line in policy:
        board = marks(line)
        reached.setdefault(canonical(board), set()).add(board)
    classes: dict[tuple, list[tree.Gap]] = {}
    for g in gaps:
        classes.setdefault(canonical(marks(g.line)), []).append(g)
    rows = [
        (sum(g.weighted for g in gs), len(gs), len({marks(g.line) for g in gs}), len(reached.get(key, ())), max(gs))
        for key, gs in classes.items()
    ]
    return sorted(rows, key=lambda r: -r[0])


KINDS = (
    "a win on the board, a block played instead",
    "a win on the board, another move played",
    "a threat on the board",
    "quiet board: the teacher's habit played (centre, else a corner), only other moves best",
    "quiet board: another move",
    "no move accepted (every reply rejected: a timeout)",
)


def decision_kind(gap: tree.Gap) -> str:
    """Which of `KINDS` a decision that gives up wins is, from the board before it."""
    if gap.move is None:
        return KINDS[5]
    board = board_after(gap.line)
    wins, blocks = winning_cells(board, "X"), winning_cells(board, "O")
    if wins:
        return KINDS[0] if gap.move in blocks else KINDS[1]
    if blocks:
        return KINDS[2]
    habit = set(habit_moves(board))
    return KINDS[3] if gap.move in habit and not habit & set(gap.best) else KINDS[4]


def openings(gaps: list[tree.Gap], top: int = 3) -> str:
    """The games' first two moves (X's opening and O's reply, or O's opening and X's reply) that
    hold most of `gaps`, with their decision counts: one subtree holding a kind (say, after O
    opens in the centre) points at what trained it there."""
    counts = Counter(show(g.line[:2]) for g in gaps).most_common(top)
    return ", ".join(f"{line}: {n}" for line, n in counts)


def print_kinds(gaps: list[tree.Gap]) -> None:
    found = {kind: [g for g in gaps if decision_kind(g) == kind] for kind in KINDS}
    print("\nthe decisions that give up wins, by what was on the board:")
    print("| kind | decisions | points | where (first two moves: decisions) |")
    print("|---|---|---|---|")
    for kind, some in found.items():
        print(f"| {kind} | {len(some)} | {100 * sum(g.weighted for g in some):.2f} | {openings(some)} |")


def show(line: Line) -> str:
    return " ".join(f"{mark}{cell}" for mark, cell in line) or "(X opens)"


def played(move: int | None) -> str:
    return "none (timeout)" if move is None else f"X{move}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an `rlvr eval tictactoe --exhaustive` folder or its results.jsonl")
    parser.add_argument("--top", type=int, default=12, help="decisions to list (largest weighted gap first)")
    parser.add_argument(
        "--train-p", type=float, default=None, help="the training opponent's p after its random replies"
    )
    parser.add_argument("--random-replies", type=int, default=4, help="the env's random_replies (k from 0 to this)")
    parser.add_argument("--trap-prob", type=float, default=1.0, help="the env's trap_prob")
    parser.add_argument("--games", type=int, default=256, help="training games a step, for the summary line")
    parser.add_argument(
        "--by-symmetry", action="store_true", help="also group the decisions by their position up to symmetry"
    )
    parser.add_argument(
        "--unsure", type=float, default=None, help="with --train-p: the decisions --restart-unsure U restarts"
    )
    parser.add_argument(
        "--by-kind", action="store_true", help="also the points given up by what was on the board (a win left, a habit)"
    )
    parser.add_argument(
        "--claims", action="store_true", help="also whether the model's reasoning states the board truly there"
    )
    args = parser.parse_args()
    for name in ("train_p", "trap_prob"):
        if getattr(args, name) is not None and not 0.0 <= getattr(args, name) <= 1.0:  # (NaN fails this too)
            parser.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if not 0 <= args.random_replies <= 5 or args.games < 1:
        parser.error("--random-replies must be from 0 to 5, --games at least 1")
    if args.unsure is not None and (args.train_p is None or not 0.0 < args.unsure <= 1.0):
        parser.error(f"--unsure must be in (0, 1] and needs --train-p, got {args.unsure}")
    try:
        policy, odds, texts = read_records(args.run)
        wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:  # a position the saved games never answer: a timed-out or unfinished tree
        line = " ".join(f"{mark}{cell}" for mark, cell in exc.args[0]) or "the empty board"
        print(f"error: {args.run} has no model move after {line} (an unfinished run?)", file=sys.stderr)
        return 2
    total, limit = sum(g.weighted for g in gaps), tree.never_losing_max_win_rate()
    print(
        f"wins vs random {100 * wins:.2f}%, limit {100 * limit:.2f}%: {len(gaps)} decisions give up {100 * total:.2f} points"
    )
    extra = args.train_p is not None
    head = "| points | given up there | line | model | best never-losing moves |"
    print(head + (" greedy at T 1 | reach | reward gap |" if extra else ""))
    print("|---" * (5 + 3 * extra) + "|")
    ks = list(range(args.random_replies + 1))
    views = [(g, *training_view(g, ks, args.train_p, args.trap_prob)) for g in gaps] if extra else []
    for i, g in enumerate(gaps[: args.top]):
        row = f"| {100 * g.weighted:.2f} | {g.gap:.3f} | {show(g.line)} | {played(g.move)} | {', '.join(map(str, g.best))} |"
        if extra:
            row += f" {odds.get(g.line, math.nan):.3f} | {views[i][1]:.4f} | {views[i][2]:.3f} |"
        print(row)
    if extra:  # over every decision, not only the listed ones
        meets = sum(at for _, at, _ in views)
        stake = sum(at * gain for _, at, gain in views)
        other = sum(at * (1 - odds.get(g.line, math.nan)) for g, at, _ in views)
        print(
            f"a training game meets these {len(gaps)} decisions {meets:.4f} times on average, with "
            f"{stake:.4f} of training reward at stake; a step of {args.games} games meets them "
            f"{args.games * meets:.1f} times and samples another move there {args.games * other:.1f} times"
        )
    if args.by_symmetry:
        rows = symmetry_view(gaps, policy)
        print(f"\n{len(gaps)} decisions, {len(rows)} positions up to symmetry:")
        print("| points | decisions | boards given up / reached | a line | model | best never-losing moves |")
        print("|---|---|---|---|---|---|")
        for points, n, wrong, seen, g in rows[: args.top]:
            print(
                f"| {100 * points:.2f} | {n} | {wrong} / {seen} | {show(g.line)} | {played(g.move)} | {', '.join(map(str, g.best))} |"
            )
    if args.by_kind:
        print_kinds(gaps)
    if args.claims:
        print_claims(gaps, policy, texts, args.top)
    if args.unsure is not None:
        print_unsure(unsure_view(policy, odds, args.unsure, ks, args.train_p, args.trap_prob), args.unsure, args.top)
    return 0


def print_claims(gaps: list[tree.Gap], policy: dict[Line, int | None], texts: dict[Line, str], top: int) -> None:
    """Whether the reasoning of each listed decision's reply states the board truly
    (`game.claim_truth`: a win, a threat to block, or no threat), and the counts over every
    decision: a reply that names a threat not on the board can make a move look forced."""

    def truth(line: Line) -> str:
        said = claim_truth(texts[line], board_after(line)) if line in texts else None
        return {True: "true", False: "false", None: "-"}[said]

    print("\nthe model's reasoning at the decisions that give up wins:")
    print("| points | line | model | its reasoning | states the board |")
    print("|---|---|---|---|---|")
    for g in gaps[:top]:
        said = parse(texts.get(g.line, "")).last("think") or "?"
        said = " ".join(said.encode("utf-8", "replace").decode().replace("|", "/").split())  # one printable cell
        said = said if len(said) <= 100 else said[:99] + "..."
        print(f"| {100 * g.weighted:.2f} | {show(g.line)} | {played(g.move)} | {said} | {truth(g.line)} |")
    false_gaps = [g for g in gaps if truth(g.line) == "false"]
    every = [truth(line) for line in policy]
    print(
        f"{len(false_gaps)} of {len(gaps)} such decisions state something false ({100 * sum(g.weighted for g in false_gaps):.2f} "
        f"points); over all {len(policy)} decisions: {every.count('false')} false, {every.count('true')} true, "
        f"{every.count('-')} with no claim checked (or no single reply recorded)"
    )


def print_unsure(rows: list[tuple[Line, int | None, float, float, float]], u: float, top: int) -> None:
    meets = sum(row[3] for row in rows)
    better = [(at, gain) for *_, at, gain in rows if gain > 1e-9]
    at_better = sum(at for at, _ in better)
    mean_gap = sum(at * gain for at, gain in better) / at_better if at_better else 0.0
    print(f"\n{len(rows)} decisions have a greedy reply below {u} at T 1 (what --restart-unsure {u} restarts)")
    print("| reach | greedy at T 1 | line | model | reward gap |")
    print("|---|---|---|---|---|")
    for line, move, sure, at, gain in rows[:top]:
        print(f"| {at:.4f} | {sure:.3f} | {show(line)} | {played(move)} | {gain:.3f} |")
    share = at_better / meets if meets else 0.0
    print(
        f"a greedy probe game meets them {meets:.4f} times on average; {100 * share:.1f}% of those meetings are at "
        f"the {len(better)} with a better move (mean reward gap there {mean_gap:.3f}), "
        f"{100 * (1 - share):.1f}% where the model's move is already the best reply"
    )


if __name__ == "__main__":
    sys.exit(main())
