"""Reference players that read only the text a model reads (`toy_text` renders it).

- FrozenLake `optimal`: reads the map, the slip probability, the rewards and the turn limit
  from the conversation, builds the lake's transition table from them and plays the
  finite-horizon value-iteration plan (`rlvr.classic.plan_horizon`) for the turns left:
  exactly optimal in expectation, slippery or not.
- Taxi `planner`: reads the walls from the map and the taxi, passenger and destination from
  the status line, and drives a shortest path (breadth-first search) to the passenger, then
  to the destination: optimal on the deterministic map, replanned every turn when it rains.

Each returns an action index; the env writes it as text. A conversation it cannot read raises
ValueError, so a renderer that drops state fails loudly.
"""

from __future__ import annotations

import re
from collections import deque
from functools import lru_cache

from rlvr.classic.value_iteration import HorizonPlan, Transition, plan_horizon
from rlvr.types import Messages

LAKE_MOVES = [(0, -1), (1, 0), (0, 1), (-1, 0)]
"""FrozenLake's actions 0..3 (left, down, right, up) as (row, column) steps."""

_TURNS = re.compile(r"ends after at most (\d+) turns")
_SLIP = re.compile(
    r"goes the chosen way with probability ([0-9.e-]+), otherwise it slides at a right angle \(([0-9.e-]+) to"
)
_REWARDS = re.compile(r"Rewards: (-?[0-9.]+) for reaching G, (-?[0-9.]+) for falling into H, (-?[0-9.]+) for any")
_TAXI = re.compile(r"Taxi: row (\d+), column (\d+), (empty|carrying the passenger)\.")
_PASSENGER = re.compile(r"Passenger: waiting at \w \(row (\d+), column (\d+)\)")
_DESTINATION = re.compile(r"Destination: \w \(row (\d+), column (\d+)\)")


def _user_texts(messages: Messages) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "user"]


def _find(pattern: re.Pattern[str], text: str, what: str) -> re.Match[str]:
    found = pattern.search(text)
    if found is None:
        raise ValueError(f"the conversation does not say {what} (no match for {pattern.pattern!r})")
    return found


def turns_left(messages: Messages) -> int:
    """The turn limit stated in the first prompt, less the turns already played."""
    limit = int(_find(_TURNS, _user_texts(messages)[0], "the turn limit").group(1))
    return limit - sum(m.get("role") == "assistant" for m in messages)


# ---- FrozenLake -----------------------------------------------------------------------------


def read_lake(text: str) -> tuple[tuple[str, ...], int]:
    """(the map's rows with the agent's cell as F, the agent's cell index) from one render."""
    rows = [line for line in text.splitlines() if line and set(line) <= set("SFHG@")]
    if not rows or len({len(r) for r in rows}) != 1 or sum(r.count("@") for r in rows) != 1:
        raise ValueError("no lake map with exactly one @ in the last message")
    row = next(i for i, r in enumerate(rows) if "@" in r)
    position = row * len(rows[0]) + rows[row].index("@")
    return tuple(r.replace("@", "F") for r in rows), position


@lru_cache(maxsize=64)
def lake_plan(rows: tuple[str, ...], success: float, rewards: tuple[float, float, float], horizon: int) -> HorizonPlan:
    """The finite-horizon plan of the lake drawn by `rows`; rewards for (G, H, F)."""
    nrow, ncol = len(rows), len(rows[0])
    cells = "".join(rows)
    side = (1.0 - success) / 2
    reward_of = dict(zip("GHF", rewards)) | {"S": rewards[2]}
    model: list[list[list[Transition]]] = []
    for s, cell in enumerate(cells):
        if cell in "GH":
            model.append([[(1.0, s, 0.0, True)] for _ in LAKE_MOVES])
            continue
        row, col = divmod(s, ncol)
        actions = []
        for a in range(len(LAKE_MOVES)):
            outcomes: list[Transition] = []
            for b, p in (((a - 1) % 4, side), (a, success), ((a + 1) % 4, side)):
                if p <= 0:
                    continue
                dr, dc = LAKE_MOVES[b]
                r, c = min(max(row + dr, 0), nrow - 1), min(max(col + dc, 0), ncol - 1)
                t = r * ncol + c
                outcomes.append((p, t, reward_of[cells[t]], cells[t] in "GH"))
            actions.append(outcomes)
        model.append(actions)
    return plan_horizon(model, horizon)


def frozen_lake_optimal(messages: Messages) -> int:
    """The optimal action for the lake, position and turns left that the conversation shows."""
    texts = _user_texts(messages)
    rules = texts[0]
    slip = _SLIP.search(rules)
    keep, side = (float(slip.group(1)), float(slip.group(2))) if slip else (1.0, 0.0)
    rewards = tuple(float(x) for x in _find(_REWARDS, rules, "the rewards").groups())
    horizon = int(_find(_TURNS, rules, "the turn limit").group(1))
    rows, position = read_lake(texts[-1])
    plan = lake_plan(rows, keep / (keep + 2 * side), (rewards[0], rewards[1], rewards[2]), horizon)
    return plan.action(position, max(turns_left(messages), 1))


# ---- Taxi -----------------------------------------------------------------------------------

TAXI_MOVES = {0: (1, 0), 1: (-1, 0), 2: (0, 1), 3: (0, -1)}
"""Taxi's actions 0..3 (south, north, east, west) as (row, column) steps; 4 pickup, 5 dropoff."""
PICKUP, DROPOFF = 4, 5


def read_taxi_map(text: str) -> list[str]:
    """The map lines between the two ``+---+`` borders of the last render."""
    lines = text.splitlines()
    borders = [i for i, line in enumerate(lines) if line.startswith("+-")]
    if len(borders) < 2:
        raise ValueError("no taxi map (two +---+ borders) in the last message")
    return lines[borders[0] + 1 : borders[1]]


def taxi_planner(messages: Messages) -> int:
    """The first action of a shortest plan to pick up and deliver the passenger."""
    text = _user_texts(messages)[-1]
    grid = read_taxi_map(text)
    taxi = _find(_TAXI, text, "where the taxi is")
    here = (int(taxi.group(1)) - 1, int(taxi.group(2)) - 1)
    if taxi.group(3) == "empty":
        waiting = _find(_PASSENGER, text, "where the passenger waits")
        target, action = (int(waiting.group(1)) - 1, int(waiting.group(2)) - 1), PICKUP
    else:
        dest = _find(_DESTINATION, text, "the destination")
        target, action = (int(dest.group(1)) - 1, int(dest.group(2)) - 1), DROPOFF
    if here == target:
        return action
    return _first_step(grid, here, target)


def _open(grid: list[str], cell: tuple[int, int], move: int) -> tuple[int, int] | None:
    """The cell a move leads to, or None when a border or a wall is in the way."""
    (r, c), (dr, dc) = cell, TAXI_MOVES[move]
    nr, nc = r + dr, c + dc
    if not 0 <= nr < len(grid) or not 0 <= 2 * nc + 1 < len(grid[nr]) - 1:
        return None
    if dc and grid[r][2 * c + 1 + dc] == "|":
        return None
    return nr, nc


def _first_step(grid: list[str], start: tuple[int, int], target: tuple[int, int]) -> int:
    first: dict[tuple[int, int], int] = {}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for move in TAXI_MOVES:
            nxt = _open(grid, cell, move)
            if nxt is None or nxt == start or nxt in first:
                continue
            first[nxt] = first.get(cell, move)
            if nxt == target:
                return first[nxt]
            queue.append(nxt)
    raise ValueError(f"no path from row {start[0] + 1}, column {start[1] + 1} to the target on this map")
