"""Reading the model's moves: a reply's move on a board (`read_move`), and a finished rollout's
turns replayed against its recorded moves (`replay`), for what the trainer reads of a game."""

from __future__ import annotations

from rlvr import Rollout, Task
from rlvr_tictactoe.board import EMPTY, Board, apply_move, game_outcome
from rlvr_tictactoe.rewards import parse


def read_move(text: str, board: Board) -> tuple[int | None, str | None]:
    """(cell, None) for a playable move in a reply, else (None, a one-line reason).

    >>> from rlvr_tictactoe.board import EMPTY_BOARD
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
