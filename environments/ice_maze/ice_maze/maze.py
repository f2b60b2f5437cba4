"""Pure ice-maze logic: seeded maps with a guaranteed path, moves, slippery dynamics, rendering
and the transition table a planner needs. No dependency on rlvr's core or on gymnasium.

A maze is a square grid of cells::

    S  start     .  frozen ice (safe)     H  hole (the episode ends, reward 0)     G  goal (reward 1)

A position is a state index ``row * size + column``, rows counted from the top. Actions are
0..3 = up, down, left, right. Walking into the border leaves the agent where it is. On slippery
ice a move goes the intended way with probability ``1 - slip_prob`` and slides to each of the
two perpendicular directions with probability ``slip_prob / 2``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

MOVES = ("up", "down", "left", "right")
"""Action names; an action is the index of its name."""
DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))
PERPENDICULAR = ((2, 3), (2, 3), (0, 1), (0, 1))
MIN_SIZE, MAX_SIZE = 2, 8
CELLS = frozenset("S.HG")
MAX_ATTEMPTS = 200
"""Random hole layouts tried before a path is carved by hand (it never comes to that in practice)."""

Transition = tuple[float, int, float, bool]
"""(probability, next state, reward, terminated)."""


@dataclass(frozen=True)
class Maze:
    """One map and its dynamics.

    >>> m = Maze(("S.", "HG"))
    >>> m.size, m.start, m.goal, m.shortest_path()
    (2, 0, 3, 2)
    >>> m.move(0, MOVES.index("right")), m.move(0, MOVES.index("up"))
    (1, 0)
    """

    rows: tuple[str, ...]
    slip_prob: float = 0.0
    """0 = deterministic moves; otherwise the chance of sliding sideways."""

    def __post_init__(self) -> None:
        n = len(self.rows)
        if not MIN_SIZE <= n <= MAX_SIZE or any(len(r) != n for r in self.rows):
            raise ValueError(f"a maze is a square of {MIN_SIZE}..{MAX_SIZE} rows of equal length, got {self.rows!r}")
        text = "".join(self.rows)
        if not CELLS.issuperset(text) or text.count("S") != 1 or text.count("G") != 1:
            raise ValueError(f"a maze needs one S, one G and only the cells 'S.HG', got {self.rows!r}")
        if not 0.0 <= self.slip_prob < 1.0:
            raise ValueError(f"slip_prob must be in [0, 1), got {self.slip_prob}")

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def num_states(self) -> int:
        return self.size * self.size

    @property
    def start(self) -> int:
        return "".join(self.rows).index("S")

    @property
    def goal(self) -> int:
        return "".join(self.rows).index("G")

    def cell(self, state: int) -> str:
        return self.rows[state // self.size][state % self.size]

    def is_terminal(self, state: int) -> bool:
        return self.cell(state) in "HG"

    def move(self, state: int, action: int) -> int:
        """Where a move in `action`'s direction leads, ignoring slips."""
        dr, dc = DELTAS[action]
        r, c = divmod(state, self.size)
        r, c = r + dr, c + dc
        if 0 <= r < self.size and 0 <= c < self.size:
            return r * self.size + c
        return state

    def directions(self, action: int) -> list[tuple[float, int]]:
        """(probability, direction actually taken) for an intended `action`."""
        if self.slip_prob == 0.0:
            return [(1.0, action)]
        side = self.slip_prob / 2
        one_way, other_way = PERPENDICULAR[action]
        return [(1.0 - self.slip_prob, action), (side, one_way), (side, other_way)]

    def slide(self, action: int, u: float) -> int:
        """The direction taken for intended `action`, given a uniform draw `u` in [0, 1)."""
        for p, direction in self.directions(action):
            if u < p:
                return direction
            u -= p
        return self.directions(action)[-1][1]

    def transitions(self) -> list[list[list[Transition]]]:
        """The model: ``P[state][action] = [(prob, next_state, reward, terminated), ...]``.

        Reward 1 on entering the goal, else 0. Terminal states loop on themselves with no
        reward (a planner's convention; an episode never acts from them).
        """
        table: list[list[list[Transition]]] = []
        for s in range(self.num_states):
            row: list[list[Transition]] = []
            for a in range(len(MOVES)):
                if self.is_terminal(s):
                    row.append([(1.0, s, 0.0, True)])
                    continue
                merged: dict[int, float] = {}
                for p, direction in self.directions(a):
                    nxt = self.move(s, direction)
                    merged[nxt] = merged.get(nxt, 0.0) + p
                row.append([(p, t, float(self.cell(t) == "G"), self.is_terminal(t)) for t, p in merged.items()])
            table.append(row)
        return table

    def shortest_path(self) -> int | None:
        """Fewest moves from start to goal without slips (None: the goal is unreachable)."""
        dist = {self.start: 0}
        queue = deque([self.start])
        while queue:
            s = queue.popleft()
            if s == self.goal:
                return dist[s]
            if self.is_terminal(s):
                continue
            for a in range(len(MOVES)):
                t = self.move(s, a)
                if t not in dist:
                    dist[t] = dist[s] + 1
                    queue.append(t)
        return None

    def render(self, position: int | None = None) -> str:
        """The grid as text, the agent shown as ``@``.

        >>> print(Maze(("S.", "HG")).render(1))
        S @
        H G
        """
        lines = []
        for r, row in enumerate(self.rows):
            cells = ["@" if r * self.size + c == position else ch for c, ch in enumerate(row)]
            lines.append(" ".join(cells))
        return "\n".join(lines)

    def coordinates(self, state: int) -> tuple[int, int]:
        """1-based (row, column) of a state, as shown to a model."""
        r, c = divmod(state, self.size)
        return r + 1, c + 1


def generate_maze(size: int, seed: int, *, hole_prob: float = 0.2, slip_prob: float = 0.0) -> Maze:
    """A random map from `seed`, always with a path from S to G.

    Start and goal are distinct cells at least `size` moves apart (Manhattan distance); each
    other cell is a hole with probability `hole_prob`. Layouts without a path are redrawn.

    >>> generate_maze(5, 7) == generate_maze(5, 7)
    True
    >>> all(generate_maze(8, s, hole_prob=0.4).shortest_path() for s in range(20))
    True
    """
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"size must be in {MIN_SIZE}..{MAX_SIZE}, got {size}")
    if not 0.0 <= hole_prob < 1.0:
        raise ValueError(f"hole_prob must be in [0, 1), got {hole_prob}")
    rng = random.Random(seed)
    cells = [(r, c) for r in range(size) for c in range(size)]
    while True:
        start, goal = rng.sample(cells, 2)
        if abs(start[0] - goal[0]) + abs(start[1] - goal[1]) >= size:
            break
    for _ in range(MAX_ATTEMPTS):
        grid = [["H" if rng.random() < hole_prob else "." for _ in range(size)] for _ in range(size)]
        maze = _with_ends(grid, start, goal, slip_prob)
        if maze.shortest_path() is not None:
            return maze
    return _with_ends(_carve(grid, start, goal, rng), start, goal, slip_prob)


Cell = tuple[int, int]


def _with_ends(grid: Sequence[Sequence[str]], start: Cell, goal: Cell, slip_prob: float) -> Maze:
    rows = [list(r) for r in grid]
    rows[start[0]][start[1]] = "S"
    rows[goal[0]][goal[1]] = "G"
    return Maze(tuple("".join(r) for r in rows), slip_prob)


def _carve(grid: list[list[str]], start: Cell, goal: Cell, rng: random.Random) -> list[list[str]]:
    """Clear a random monotone path from start to goal."""
    (r, c), (gr, gc) = start, goal
    steps = [(1 if gr > r else -1, 0)] * abs(gr - r) + [(0, 1 if gc > c else -1)] * abs(gc - c)
    rng.shuffle(steps)
    for dr, dc in steps:
        r, c = r + dr, c + dc
        grid[r][c] = "."
    return grid
