"""`rlvr play tictactoe`: a person takes the opponent's seat in an ordinary rollout.

The model sees exactly what it sees in training and evaluation (it plays X, its opponent O,
same prompts, same rules for invalid moves); only the opponent's moves come from the person
instead of minimax. On screen the person may be X: the marks are then swapped for display.

`terminal` is duck-typed (see `rlvr.commands.terminal`): `show(title, body)` redraws the screen,
`ask(prompt, parse)` reads a line and re-prompts until `parse` stops raising ValueError.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rlvr.types import SamplingArgs, Task
from rlvr_tictactoe.game import EMPTY_BOARD, Board, apply_move, legal_moves, render
from rlvr_tictactoe.rewards import PARSER, GameState
from rlvr_tictactoe.tasks import opening_task

HumanMove = Callable[[GameState], "int | Awaitable[int]"]


class Seat(Protocol):
    """What a person's game needs of the env (`TicTacToeEnv`, which imports this module): a seat
    for the person, and its rollout."""

    human: HumanMove | None
    sampling: SamplingArgs

    async def rollout(self, client: Any, task: Task, sampling: SamplingArgs, seed: int) -> GameState: ...


QUIT_WORDS = ("q", "quit", "exit")
RESULTS = {"win": "loss", "loss": "win", "draw": "draw", None: "unfinished"}
"""The model's outcome -> the person's."""


class Display:
    """Draws boards from the person's side: `human_mark` is theirs, the other the model's."""

    def __init__(self, terminal: Any, human_mark: str) -> None:
        self.terminal = terminal
        self.human = human_mark
        self.model = "O" if human_mark == "X" else "X"
        self.title = f"tic-tac-toe: you are {self.human}, the model is {self.model}"

    def board(self, board: Board) -> str:
        """`board` (model = X) drawn with the person's marks."""
        swap = {"X": self.model, "O": self.human, " ": " "}
        return render(tuple(swap[c] for c in board))

    def show(self, board: Board, *lines: str) -> None:
        self.terminal.show(self.title, "\n".join([self.board(board), "", *filter(None, lines)]))

    def ask_cell(self, board: Board) -> int:
        free = legal_moves(board)

        def parse(text: str) -> int:
            text = text.strip().lower()
            if text in QUIT_WORDS:
                raise KeyboardInterrupt
            if not (text.isascii() and text.isdigit()) or int(text) not in free:
                cells = ", ".join(map(str, free))
                raise ValueError(f"{text!r} is not a free cell; choose one of {cells} (q quits)")
            return int(text)

        return int(self.terminal.ask(f"Your move ({self.human}), a free cell number", parse))


def _thought(state: GameState) -> str:
    """The model's reasoning on its last turn, shortened for the screen."""
    if not state.turns:
        return ""
    think = PARSER.parse(state.turns[-1].completion.text).last("think") or ""
    think = " ".join(think.split())
    return f"Model: {think[:200]}{'...' if len(think) > 200 else ''}" if think else ""


async def play_human(
    env: Seat,
    client: Any,
    terminal: Any,
    *,
    human_mark: str = "O",
    human_first: bool = False,
    seed: int | None = None,
    sampling: SamplingArgs | None = None,
) -> str:
    """Play one game; returns the person's result: `win`, `loss`, `draw` or `unfinished`."""
    seed = random.randrange(2**31) if seed is None else seed
    display = Display(terminal, human_mark)
    first = None
    if human_first:
        display.show(EMPTY_BOARD, "You move first.")
        first = display.ask_cell(EMPTY_BOARD)
    board = EMPTY_BOARD if first is None else apply_move(EMPTY_BOARD, first, "O")
    display.show(board, "The model is thinking...")

    def human_move(state: GameState) -> int:
        rejected = f" ({state.invalid_moves} invalid moves so far)" if state.invalid_moves else ""
        display.show(state.board, f"The model took {state.moves[-1]}{rejected}.", _thought(state))
        cell = display.ask_cell(state.board)
        display.show(apply_move(state.board, cell, "O"), f"You took {cell}. The model is thinking...")
        return cell

    env.human = human_move
    try:
        task = opening_task("play", seed, 0.0, first)
        state = await env.rollout(client, task, sampling or env.sampling, seed)
    finally:
        env.human = None
    if state.error is not None:
        display.show(state.board, f"The game stopped: {state.error}")
        return "unfinished"
    result = RESULTS[state.outcome]
    model_moved_last = bool(state.outcome and len(state.moves) % 2)  # the model moves first after the prompt
    last = f"The model took {state.moves[-1]}. " if model_moved_last else ""
    lines = {
        "win": "You win!",
        "loss": f"{last}The model wins.",
        "draw": f"{last}Draw.",
        "unfinished": f"The game stopped after {state.turn} model turns ({state.stop_reason}), unfinished.",
    }
    extra = f"The model's invalid moves: {state.invalid_moves}." if state.invalid_moves else ""
    display.show(state.board, lines[result], _thought(state) if last else "", extra)
    return result
