"""The tic-tac-toe environment: the model plays X against a seeded, tunable minimax opponent.

Dataset: a pure function of the arguments. Task `i` of a split gets a seed hashed from
(split, seed, i) (train seeds even, eval seeds odd: the splits never share one), a bucket
`i % num_buckets`, a random-move probability p drawn uniformly inside that bucket's slice of
[min_random_move_prob, max_random_move_prob], and a coin for who starts; when the opponent
starts, its first move is already on the prompt's board.

Episode: each model turn is read for `<move>N</move>`; an unreadable, off-board or taken cell
is rejected (the board is shown again with a one-line error, counted in the state); a valid
move is played, then the opponent replies with `opponent_move(board, "O", p, rng, trap_prob)` where rng is
seeded from (task seed, board), so rollouts of one group that reach the same board get the
same reply. The game ends when it is won, lost or drawn (`game_over`, terminated) or after
`max_turns` model turns (truncated: a timeout).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr import ChatClient, MultiTurnEnv, Rollout, SamplingArgs, Task, stop
from rlvr.deprecation import renamed_arguments
from rlvr.types import Messages
from rlvr_tictactoe import players, tree
from rlvr_tictactoe.game import (
    EMPTY,
    EMPTY_BOARD,
    Board,
    apply_move,
    claim_truth,
    missed_win,
    move_rng,
    opponent_move,
    render,
    teacher_replies,
)
from rlvr_tictactoe.rewards import PARSER, GameState, make_rubric, parse, summarize
from rlvr_tictactoe.tasks import board_view, game_outcome, make_task, opening_task, reply_prob

OPPONENTS = {"optimal": (0.0, 0.0), "random": (1.0, 1.0)}
STARTS = ("random", "always", "never")

SYSTEM_PROMPT = f"""You are playing tic-tac-toe as X against an opponent who plays O. Three of your marks in a row, column or diagonal win.

The cells are numbered 0-8, row by row; a free cell shows its number, a taken one its mark:
{render(EMPTY_BOARD)}

On every turn, reason briefly inside <think>...</think>, then give the number of the free cell you take inside <move>...</move>, for example:
<think>The centre is free and lies on four lines.</think>
<move>4</move>
Reply with exactly these two blocks and nothing else. A move that is missing, unreadable or not a free cell is rejected: you are shown the board again and must move again."""

HumanMove = Callable[[GameState], "int | Awaitable[int]"]


# ---- texts ----------------------------------------------------------------------------------


def read_move(text: str, board: Board) -> tuple[int | None, str | None]:
    """(cell, None) for a playable move in a reply, else (None, a one-line reason).

    >>> read_move("<think>x</think><move>4</move>", EMPTY_BOARD)
    (4, None)
    >>> read_move("<move>four</move>", EMPTY_BOARD)
    (None, "'four' is not a cell number; answer with <move>N</move>, N from 0 to 8")
    """
    move = parse(text).last("move")
    if move is None:
        return None, "no <move>N</move> found (a move inside <think> does not count)"
    if not move.isascii() or not move.isdigit():
        return None, f"{move[:20]!r} is not a cell number; answer with <move>N</move>, N from 0 to 8"
    cell = int(move)
    if cell > 8:
        return None, f"cell {cell} is off the board; cells are numbered 0 to 8"
    if board[cell] != EMPTY:
        return None, f"cell {cell} is already taken by {board[cell]}"
    return cell, None


_ENDINGS = {"win": "you win.", "loss": "you lose.", "draw": "the board is full: a draw."}


# ---- environment ----------------------------------------------------------------------------


class TicTacToeEnv(MultiTurnEnv[GameState]):
    """The model (X) against the seeded opponent (O); see the module docstring."""

    def __init__(
        self,
        dataset: Sequence[Task],
        *,
        low: float,
        high: float,
        num_buckets: int,
        eval_dataset: Sequence[Task] | None = None,
        max_turns: int | None = None,
        sampling: SamplingArgs | None = None,
        loss_reward: float = 0.0,
        trap_prob: float = 0.0,
        probe_random_replies: int | None = None,
        probe_random_share: float = 1.0,
        claim_penalty: float = 0.0,
        missed_win_penalty: float = 0.0,
    ) -> None:
        super().__init__(
            dataset,
            eval_dataset=eval_dataset,
            system_prompt=SYSTEM_PROMPT,
            parser=PARSER,
            rubric=make_rubric(loss_reward, claim_penalty, missed_win_penalty),
            sampling=sampling or SamplingArgs(max_tokens=256),  # a think + move is ~30 tokens
            max_turns=max_turns,
        )
        self.min_random_move_prob, self.max_random_move_prob = low, high
        self.difficulty_range = (low, high)
        self.num_buckets = num_buckets
        self.trap_prob = trap_prob
        """How often a best move of the opponent is one of `trap_moves` (else any best move)."""
        self.probe_random_replies = probe_random_replies
        """The k of a greedy probe's random replies (`probe_task`); None: its task's own."""
        self.probe_random_share = probe_random_share
        """The share of probes that get `probe_random_replies` (drawn from each probe's seed)."""
        self.human: HumanMove | None = None
        """When set (by `rlvr play`), a person makes the opponent's moves instead of minimax."""

    def setup_state(self, task: Task) -> GameState:
        state = GameState(
            task=task, board=tuple(task.info["board"]), random_move_prob=float(task.info["random_move_prob"])
        )
        state.info["moves"] = state.moves  # the rollout's record: its moves (`restart_tasks` reads them)
        return state

    async def env_response(self, messages: Messages, state: GameState) -> Messages:
        text = str(messages[-1].get("content") or "")
        if claim_truth(text, state.board) is False:  # its reasoning misstates the board (a metric)
            state.false_claims += 1
        cell, error = read_move(text, state.board)
        if cell is None:
            state.invalid_moves += 1
            return [_user(board_view(f"Invalid move: {error}. Try again.", state.board))]
        if missed_win(state.board, cell):  # a metric; a cost with missed_win_penalty, a turn score (turn_rewards)
            state.missed_wins += 1
        state.board = apply_move(state.board, cell, "X")
        state.moves.append(cell)
        if (outcome := game_outcome(state.board)) is not None:
            state.outcome = outcome
            status = f"You took {cell}; {_ENDINGS[outcome]} Game over."
            return [_user(board_view(status, state.board, over=True))]
        reply = await self.opponent_cell(state)
        if reply is None:  # a line of the game tree ends here; `tree_children` extends it
            state.line_ended = True
            return []
        state.board = apply_move(state.board, reply, "O")
        state.moves.append(reply)
        if (outcome := game_outcome(state.board)) is not None:
            state.outcome = outcome
            status = f"You took {cell}; O took {reply}; {_ENDINGS[outcome]} Game over."
            return [_user(board_view(status, state.board, over=True))]
        return [_user(board_view(f"You took {cell}; O took {reply}. Your move.", state.board))]

    async def opponent_cell(self, state: GameState) -> int | None:
        """The opponent's reply on `state.board`: the task's fixed line of replies (exact
        evaluation; None once it runs out), the person playing, or seeded minimax."""
        if "line" in state.task.info:
            line, played = state.task.info["line"], len(state.moves) // 2
            return line[played] if played < len(line) else None
        if self.human is None:
            rng = move_rng(state.task.seed, state.board)
            p = reply_prob(state.board, state.random_move_prob, state.task.info.get("random_replies", 0))
            return opponent_move(state.board, "O", p, rng, self.trap_prob)
        cell = self.human(state)
        return cell if isinstance(cell, int) else await cell

    @stop
    def game_over(self, state: GameState) -> bool:
        return state.outcome is not None

    @stop(truncated=True)
    def line_ends(self, state: GameState) -> bool:
        """Exact evaluation: the task's line of O replies ran out (see `rlvr_tictactoe.tree`)."""
        return state.line_ended

    def probe_task(self, task: Task, seed: int) -> Task:
        """A greedy probe (the trainer's `restart_greedy`) of a training task: with
        `probe_random_replies` set, its opponent's first k = that many moves are random (the
        task's own k otherwise), in a share `probe_random_share` of the probes, chosen by each
        probe's seed. Why: the lines a greedy policy still lost at the end of plan `greedy`
        mostly need four given random replies, which only the k = 4 tasks (one in five) can
        play; but a probe at k = 4 never meets a trap the opponent sets earlier (plan `cover`,
        docs/RESULTS.md; `scripts/tictactoe_line_odds.py`)."""
        task = super().probe_task(task, seed)
        if self.probe_random_replies is None or "line" in task.info:
            return task
        if random.Random(f"probe:{seed}").random() >= self.probe_random_share:  # (str seeds: stable)
            return task
        return dataclasses.replace(task, info={**task.info, "random_replies": self.probe_random_replies})

    def restart_tasks(self, task: Task, rollout: Rollout) -> list[Task]:
        """The game of `rollout` again from before each of the model's moves after its first,
        where the game was still open: the conversation up to there as the prompt, the board
        in the task (its seed, hence the opponent's replies on a board, unchanged). A record
        that does not match the turns (`replay`) or a line of exact evaluation gives none."""
        replayed = replay(task, rollout) if "line" not in task.info else None
        prompt, out = list(task.prompt), []
        for turn, (_, cell, board, played) in zip(rollout.turns, replayed or []):
            prompt += [turn.completion.message(), *turn.env_messages]
            if cell is None:
                continue
            if game_outcome(board) is not None:
                break
            info = {**task.info, "board": "".join(board)}
            out.append(Task(id=f"{task.id}@{played}", prompt=tuple(prompt), info=info, seed=task.seed))
        return out

    def turn_rewards(self, task: Task, rollout: Rollout) -> list[float] | None:
        """-1 for each model turn whose accepted move left a win on the board for another cell
        (the metric `missed_wins`, `game.missed_win`), 0 for every other turn; the trainer's
        `turn_credit` adds them, normalised within the group, to those turns' advantages alone.
        Why: a missed win rarely costs the game at once (a later move may still win, or the
        draw scores 0.7 beside a win's 1.2), and the episode's advantage is shared by all its
        turns, so the decision that gave up the win is barely told apart from the rest. Taking
        a win at once is always a best move, so the score never points away from the best
        play. None when the record does not match the turns (`replay`)."""
        replayed = replay(task, rollout)
        if replayed is None:
            return None
        scores = [-1.0 if cell is not None and missed_win(before, cell) else 0.0 for before, cell, _, _ in replayed]
        return scores + [0.0] * (len(rollout.turns) - len(scores))

    def other_replies(self, task: Task) -> list[str]:
        """The replies the trainer's `restart_explore` may give at a restart: every move the
        teacher might make on the task's board (`game.teacher_replies`: a win, else a block,
        else any free cell), in its words and the rewarded format. The teacher's moves, not
        the best ones: which is better is left to the games. None on a finished board."""
        board = tuple(task.info.get("board") or ())
        if len(board) != 9 or game_outcome(board) is not None:
            return []
        return [players.reply(cell, why) for cell, why in teacher_replies(board, "X")]

    # ---- the game tree, for exact evaluation (`rlvr eval tictactoe --exhaustive`) -------------

    tree_opponents = tuple(tree.OPPONENT_P)
    tree_failures = tree.FAILURES

    def tree_roots(self, seed: int) -> list[Task]:
        roots = []
        for opening in (None, *range(9)):
            base = opening_task("root", seed, 0.0, opening)
            roots.append(tree.line_task(base, opening=opening, moves=[], line=[], weights=tree.root_weights(opening)))
        return roots

    def tree_children(self, state: GameState) -> list[Task]:
        return tree.children(state.task, state.board, state.moves) if state.line_ended else []

    def tree_weights(self, task: Task) -> dict[str, float]:
        return dict(task.info["line_weights"])

    def tree_leaf(self, state: GameState) -> dict[str, Any]:
        return tree.leaf(state)

    def tree_judge(self, messages: Messages, reply: str) -> str | None:
        """`rejected`, `losing` or None for a reply (the risky list of `rlvr.exact_sampled`)."""
        return tree.judge(messages, reply)

    # ---- data the trainer reads, hooks the CLI uses -----------------------------------------

    def difficulty(self, task: Task) -> float:
        """The opponent's random-move probability p: the trainer stratifies batches by it."""
        return float(task.info["random_move_prob"])

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return {name: functools.partial(players.policy, name) for name in players.POLICIES}

    def default_model(self) -> str | None:
        return default_model()

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        return summarize(rollouts)

    async def play_human(self, client: Any, terminal: Any, **options: Any) -> str:
        """`rlvr play`: a person takes the opponent's seat (see `rlvr_tictactoe.interactive`)."""
        from rlvr_tictactoe.interactive import play_human

        return await play_human(self, client, terminal, **options)


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def replay(task: Task, rollout: Rollout) -> list[tuple[Board, int | None, Board, int]] | None:
    """Each model turn of `rollout` up to the game's end, replayed through `read_move` against
    its recorded moves (`rollout.info["moves"]`): the board the turn saw, the cell it took
    (None: rejected), the board after it and the opponent's reply, and the number of recorded
    moves played by then. None when the record does not match the turns."""
    moves, board = rollout.info.get("moves"), tuple(task.info["board"])
    if not isinstance(moves, list):
        return None
    played, out = 0, []
    for turn in rollout.turns:
        before = board
        cell, _ = read_move(str(turn.completion.message().get("content") or ""), board)
        if cell is not None:
            if played >= len(moves) or moves[played] != cell:
                return None
            board, played = apply_move(board, cell, "X"), played + 1
            if played < len(moves) and game_outcome(board) is None:  # the opponent replied
                try:
                    board, played = apply_move(board, moves[played], "O"), played + 1
                except ValueError:  # not a free cell: not this game's record
                    return None
        out.append((before, cell, board, played))
        if game_outcome(board) is not None:
            break
    return out


# ---- entry point ----------------------------------------------------------------------------


MODEL_VAR = "RLVR_TICTACTOE_MODEL"
SHIPPED_MODEL = Path(__file__).resolve().parents[3] / "models" / "tictactoe-tiny"
"""The trained model committed in the rlvr repository (see its README.md); present in a source
checkout and an editable install, absent from a wheel."""


def default_model() -> str:
    """`$RLVR_TICTACTOE_MODEL` if set, else the shipped model when this is a source checkout, else
    the optimal reference player (`policy:optimal`)."""
    if os.environ.get(MODEL_VAR):
        return os.environ[MODEL_VAR]
    if (SHIPPED_MODEL / "config.json").is_file():
        return str(SHIPPED_MODEL)
    return "policy:optimal"


@renamed_arguments(num_examples="num_tasks", eval_examples="eval_tasks", num_groups="num_buckets")
def load_environment(
    num_tasks: int = 1000,
    seed: int = 0,
    min_random_move_prob: float = 0.0,
    max_random_move_prob: float = 1.0,
    num_buckets: int = 8,
    max_turns: int | None = 8,
    model_starts: str = "random",
    opponent: str | None = None,
    eval_tasks: int = 200,
    eval_seed: int | None = None,
    loss_reward: float = 0.0,
    trap_prob: float = 0.0,
    opening_plies: int = 0,
    opening_history: bool = False,
    random_replies: int = 0,
    probe_random_replies: int | None = None,
    probe_random_share: float = 1.0,
    claim_penalty: float = 0.0,
    missed_win_penalty: float = 0.0,
) -> TicTacToeEnv:
    """Build the environment; every argument is documented in the package README.

    `opponent` fixes the opponent of both splits: `optimal` (p = 0), `random` (p = 1), or
    `mix` / None (p from [min_random_move_prob, max_random_move_prob]). A zero-width range
    has a single bucket, whatever `num_buckets` says. The old names `num_examples`,
    `eval_examples` and `num_groups` still work, with a DeprecationWarning.
    """
    if opponent not in (None, "mix", *OPPONENTS):
        raise ValueError(f"opponent must be 'optimal', 'random', 'mix' or null, got {opponent!r}")
    low, high = OPPONENTS.get(opponent or "mix", (min_random_move_prob, max_random_move_prob))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    if not (numbers and 0.0 <= low <= high <= 1.0):  # (NaN fails the comparison)
        raise ValueError(f"need 0 <= min_random_move_prob <= max_random_move_prob <= 1, got {low} and {high}")
    if not (isinstance(loss_reward, (int, float)) and math.isfinite(loss_reward) and loss_reward <= 0.5):
        raise ValueError(f"loss_reward must be a finite number <= 0.5 (a draw's reward), got {loss_reward!r}")
    for name, value in {
        "trap_prob": trap_prob,
        "probe_random_share": probe_random_share,
        "claim_penalty": claim_penalty,
        "missed_win_penalty": missed_win_penalty,
    }.items():
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):  # (NaN too)
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if model_starts not in STARTS:
        raise ValueError(f"model_starts must be one of {', '.join(STARTS)}; got {model_starts!r}")
    if isinstance(opening_plies, bool) or not isinstance(opening_plies, int) or not 0 <= opening_plies <= 7:
        raise ValueError(f"opening_plies must be an integer from 0 to 7, got {opening_plies!r}")
    if not isinstance(opening_history, bool):
        raise ValueError(f"opening_history must be true or false, got {opening_history!r}")
    if probe_random_share != 1.0 and probe_random_replies is None:
        raise ValueError("probe_random_share is the share of probes given probe_random_replies, which is not set")
    reply_counts = {"random_replies": random_replies}
    if probe_random_replies is not None:  # (None: each probe keeps its task's own k)
        reply_counts["probe_random_replies"] = probe_random_replies
    for name, value in reply_counts.items():
        if type(value) is not int or not 0 <= value <= 5:  # (not a bool either)
            raise ValueError(f"{name} must be an integer from 0 to 5, got {value!r}")
    counts = {"num_tasks": num_tasks, "eval_tasks": eval_tasks, "num_buckets": num_buckets}
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    buckets = 1 if low == high else num_buckets
    if buckets > num_tasks:
        raise ValueError(f"num_buckets ({buckets}) must not exceed num_tasks ({num_tasks})")

    def split(name: str, n: int, s: int) -> list[Task]:
        train = name == "train"  # evaluation starts from the empty board, against the plain opponent
        plies, replies = (opening_plies, random_replies) if train else (0, 0)
        return [
            make_task(name, i, s, low, high, buckets, model_starts, float(trap_prob), plies, opening_history, replies)
            for i in range(n)
        ]

    return TicTacToeEnv(
        split("train", num_tasks, seed),
        eval_dataset=split("eval", eval_tasks, seed if eval_seed is None else eval_seed),
        low=low,
        high=high,
        num_buckets=buckets,
        max_turns=max_turns,
        loss_reward=float(loss_reward),
        trap_prob=float(trap_prob),
        probe_random_replies=probe_random_replies,
        probe_random_share=float(probe_random_share),
        claim_penalty=float(claim_penalty),
        missed_win_penalty=float(missed_win_penalty),
    )
