"""Reference players for TextArena games that read only the text a model reads.

Each is `fn(messages, rng) -> reply` (a `rlvr.clients.policy.Policy` function) and answers in
the game's own format, a move in square brackets:

- `random` (any game): one of the moves the last message lists (`'[4]'`, `'[check]'`); where
  none are listed, a number in the range the rules state ("between 1 and 20"); else one of
  the bracketed moves the last message or the rules quote (`[e2e4]`, `[a,b]`), which may be
  a template or illegal here (the game then refuses it); else a plain message (a free-text
  turn). docs/environments.md lists the games where it plays without a refused move.
- GuessTheNumber `bisect`: halves the range left by its guesses and the game's hints.
- TicTacToe `optimal`: minimax on the board of the last message (never loses).
- KuhnPoker `never_fold`: bets when it may and calls a bet. TextArena's KuhnPoker (0.7.4)
  puts only the antes in the pot, so folding can only lose and betting can only win a fold:
  this strategy is dominant there (the textbook equilibrium is not).

A conversation a player cannot read raises ValueError, so a changed game text fails loudly.
"""

from __future__ import annotations

import functools
import random
import re

from rlvr.types import Messages

_LISTED = re.compile(r"'\[([^\]']+)\]'")
_RANGE = re.compile(r"between (-?\d+) and (-?\d+)")
_BRACKET = re.compile(r"\[\s*(-?\d+)\s*\]")
_QUOTED = re.compile(r"\[[^\[\]\n]{1,40}\]")


def user_texts(messages: Messages) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "user"]


def assistant_texts(messages: Messages) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "assistant"]


def listed_moves(text: str) -> list[str]:
    r"""The moves the last line of `text` that lists any lists, in its order.

    >>> listed_moves("Available Moves: '[0]', '[4]'\nPlayer 1: [0]\nAvailable Moves: '[4]'")
    ['4']
    """
    lines = [found for line in text.splitlines() if (found := _LISTED.findall(line))]
    return lines[-1] if lines else []


def quoted_moves(text: str) -> list[str]:
    """The bracketed moves `text` quotes, once each, in order.

    >>> quoted_moves("Move with [e2e4] or [e7e5]; not [e2e4] again.")
    ['[e2e4]', '[e7e5]']
    """
    return list(dict.fromkeys(_QUOTED.findall(text)))


FREE_TEXT = "I have nothing to add."
"""What `random` says where nothing in the game's text looks like a move (a free-text turn:
a clue, a message in a debate)."""


def random_player(messages: Messages, rng: random.Random) -> str:
    """A move the last message lists; else a number in the range the rules state; else a
    bracketed move the last message, then the rules, quote; else a plain message. Drawn
    uniformly where there are several."""
    texts = user_texts(messages)
    moves = listed_moves(texts[-1]) if texts else []
    if moves:
        return f"[{rng.choice(moves)}]"
    stated = _RANGE.search(texts[0]) if texts else None
    if stated is not None:
        return f"[{rng.randint(int(stated.group(1)), int(stated.group(2)))}]"
    quoted = (quoted_moves(texts[-1]) or quoted_moves(texts[0])) if texts else []
    return rng.choice(quoted) if quoted else FREE_TEXT


# ---- GuessTheNumber ---------------------------------------------------------------------------

_HINT = re.compile(r"The target number is (higher|lower)")


def guess_bisect(messages: Messages, rng: random.Random) -> str:
    """The middle of the range that the rules, the earlier guesses and their hints leave."""
    texts = user_texts(messages)
    stated = _RANGE.search(texts[0]) if texts else None
    if stated is None:
        raise ValueError("the rules state no range ('between A and B')")
    low, high = int(stated.group(1)), int(stated.group(2))
    for guess_text, reply in zip(assistant_texts(messages), texts[1:]):
        guess, hint = _BRACKET.search(guess_text), _HINT.search(reply)
        if guess is None or hint is None:
            continue
        if hint.group(1) == "higher":
            low = max(low, int(guess.group(1)) + 1)
        else:
            high = min(high, int(guess.group(1)) - 1)
    return f"[{(low + high) // 2}]"


# ---- TicTacToe --------------------------------------------------------------------------------

_MARK = re.compile(r"you will be '([XO])'")
_CELL = re.compile(r"^\s*(\S)\s*\|\s*(\S)\s*\|\s*(\S)\s*$", re.MULTILINE)
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def read_board(text: str) -> str:
    """The last 3x3 board in `text` as 9 characters: X, O, or . for a free cell."""
    rows = _CELL.findall(text)[-3:]
    if len(rows) != 3:
        raise ValueError("no tic-tac-toe board (three 'a | b | c' rows) in the last message")
    return "".join(c if c in "XO" else "." for row in rows for c in row)


def _winner(board: str) -> str | None:
    return next((board[a] for a, b, c in LINES if board[a] != "." and board[a] == board[b] == board[c]), None)


@functools.lru_cache(maxsize=None)
def _value(board: str, me: str, to_move: str) -> int:
    """+1 when `me` wins with best play from here, 0 a draw, -1 a loss."""
    won = _winner(board)
    if won is not None:
        return 1 if won == me else -1
    free = [i for i, c in enumerate(board) if c == "."]
    if not free:
        return 0
    other = "O" if to_move == "X" else "X"
    values = [_value(board[:i] + to_move + board[i + 1 :], me, other) for i in free]
    return max(values) if to_move == me else min(values)


def tictactoe_optimal(messages: Messages, rng: random.Random) -> str:
    """A move of best value for the mark the rules give this seat (ties broken at random)."""
    texts = user_texts(messages)
    mark = _MARK.search(texts[0]) if texts else None
    if mark is None:
        raise ValueError("the rules do not say which mark this seat plays ('you will be ...')")
    me = mark.group(1)
    other = "O" if me == "X" else "X"
    board = read_board(texts[-1])
    free = [i for i, c in enumerate(board) if c == "."]
    if not free:
        raise ValueError("the board has no free cell")
    scores = {i: _value(board[:i] + me + board[i + 1 :], me, other) for i in free}
    best = max(scores.values())
    return f"[{rng.choice([i for i in free if scores[i] == best])}]"


# ---- KuhnPoker --------------------------------------------------------------------------------


def kuhn_never_fold(messages: Messages, rng: random.Random) -> str:
    """Bet when it may, call a bet, never check or fold: dominant in TextArena's KuhnPoker,
    whose bets and calls do not enter the pot (textarena 0.7.4), so that a fold only loses
    and a bet only offers the opponent the chance to fold."""
    texts = user_texts(messages)
    legal = listed_moves(texts[-1].rsplit("Your available actions are:", 1)[-1]) if texts else []
    for move in ("bet", "call"):
        if move in legal:
            return f"[{move}]"
    raise ValueError("the last message offers neither [bet] nor [call]")


PLAYERS = {
    "GuessTheNumber": {"bisect": guess_bisect},
    "TicTacToe": {"optimal": tictactoe_optimal},
    "KuhnPoker": {"never_fold": kuhn_never_fold},
}
"""The game-specific players, by the game's name (its id up to the first '-')."""
