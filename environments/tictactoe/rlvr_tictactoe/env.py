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

import functools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr import ChatClient, MultiTurnEnv, Rollout, SamplingArgs, Task, stop
from rlvr.deprecation import renamed_arguments
from rlvr.types import Messages
from rlvr_tictactoe import interactive, players, training, tree
from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    apply_move,
    claim_truth,
    game_outcome,
    missed_win,
    move_rng,
    opponent_move,
    render,
    reply_prob,
)
from rlvr_tictactoe.moves import read_move
from rlvr_tictactoe.rewards import PARSER, GameState, make_rubric, summarize
from rlvr_tictactoe.tasks import board_view, make_task, opening_task

OPPONENTS = {"optimal": (0.0, 0.0), "random": (1.0, 1.0)}
STARTS = ("random", "always", "never")

SYSTEM_PROMPT = f"""You are playing tic-tac-toe as X against an opponent who plays O. Three of your marks in a row, column or diagonal win.

The cells are numbered 0-8, row by row; a free cell shows its number, a taken one its mark:
{render(EMPTY_BOARD)}

On every turn, reason briefly inside <think>...</think>, then give the number of the free cell you take inside <move>...</move>, for example:
<think>The centre is free and lies on four lines.</think>
<move>4</move>
Reply with exactly these two blocks and nothing else. A move that is missing, unreadable or not a free cell is rejected: you are shown the board again and must move again."""


# ---- texts ----------------------------------------------------------------------------------


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
        self.human: interactive.HumanMove | None = None
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

    # ---- the training protocols it offers (`rlvr.train.protocols`; see `rlvr_tictactoe.training`)

    def probe_task(self, task: Task, seed: int) -> Task:
        """`Probed`: the task a greedy probe plays (`training.probe_task`)."""
        return training.probe_task(task, seed, self.probe_random_replies, self.probe_random_share)

    def restart_tasks(self, task: Task, rollout: Rollout) -> list[Task]:
        """`Restartable`: the game again from before each later move (`training.restart_tasks`)."""
        return training.restart_tasks(task, rollout)

    def turn_rewards(self, task: Task, rollout: Rollout) -> list[float] | None:
        """`TurnScored`: -1 for a turn that left a win on the board (`training.turn_rewards`)."""
        return training.turn_rewards(task, rollout)

    def other_replies(self, task: Task) -> list[str]:
        """`Explorable`: the teacher's moves on the task's board (`training.other_replies`)."""
        return training.other_replies(task)

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
        return await interactive.play_human(self, client, terminal, **options)


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


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
    _check_options(
        loss_reward=loss_reward,
        trap_prob=trap_prob,
        probe_random_share=probe_random_share,
        claim_penalty=claim_penalty,
        missed_win_penalty=missed_win_penalty,
        model_starts=model_starts,
        opening_plies=opening_plies,
        opening_history=opening_history,
        random_replies=random_replies,
        probe_random_replies=probe_random_replies,
        counts={"num_tasks": num_tasks, "eval_tasks": eval_tasks, "num_buckets": num_buckets},
    )
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


def _check_options(
    *,
    loss_reward: float,
    trap_prob: float,
    probe_random_share: float,
    claim_penalty: float,
    missed_win_penalty: float,
    model_starts: str,
    opening_plies: int,
    opening_history: bool,
    random_replies: int,
    probe_random_replies: int | None,
    counts: dict[str, int],
) -> None:
    """`load_environment`'s checks of its options: ValueError naming the first bad one."""
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
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
