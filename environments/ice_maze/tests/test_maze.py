"""Maze generation and dynamics: reproducible, always solvable, probabilities that add up."""

from __future__ import annotations

import random

import pytest
from ice_maze.maze import MOVES, Maze, generate_maze


@pytest.mark.parametrize("size", range(4, 9))
def test_maps_are_reproducible_and_always_solvable(size: int) -> None:
    for seed in range(60):
        maze = generate_maze(size, seed, hole_prob=0.35)
        assert maze == generate_maze(size, seed, hole_prob=0.35)
        assert maze.size == size
        assert maze.shortest_path() is not None, maze.render()
        sr, sc = divmod(maze.start, size)
        gr, gc = divmod(maze.goal, size)
        assert abs(sr - gr) + abs(sc - gc) >= size


def test_seeds_give_different_maps() -> None:
    assert len({generate_maze(6, s).rows for s in range(30)}) == 30


def test_even_a_lake_of_holes_gets_a_path() -> None:
    maze = generate_maze(8, 3, hole_prob=0.99)  # no random layout passes: a path is carved
    distance = sum(abs(a - b) for a, b in zip(divmod(maze.start, 8), divmod(maze.goal, 8), strict=True))
    assert maze.shortest_path() == distance


def test_moves_and_edges() -> None:
    maze = Maze(("S..", ".H.", "..G"))
    up, down, left, right = (MOVES.index(m) for m in ("up", "down", "left", "right"))
    assert maze.move(0, up) == 0 and maze.move(0, left) == 0
    assert maze.move(0, right) == 1 and maze.move(0, down) == 3
    assert maze.move(8, down) == 8 and maze.move(8, right) == 8


def test_transition_table_is_a_distribution() -> None:
    maze = generate_maze(5, 1, slip_prob=0.3)
    table = maze.transitions()
    for s, row in enumerate(table):
        for outcomes in row:
            assert sum(p for p, *_ in outcomes) == pytest.approx(1.0)
            for _, t, r, done in outcomes:
                assert r == (1.0 if maze.cell(t) == "G" and not maze.is_terminal(s) else 0.0)
                assert done == maze.is_terminal(t)


def test_slide_matches_the_stated_probabilities() -> None:
    maze = Maze(("S...", "....", "....", "...G"), slip_prob=0.2)
    rng = random.Random(0)
    up = MOVES.index("up")
    draws = [maze.slide(up, rng.random()) for _ in range(20_000)]
    assert draws.count(up) / len(draws) == pytest.approx(0.8, abs=0.015)
    assert draws.count(MOVES.index("left")) / len(draws) == pytest.approx(0.1, abs=0.01)
    assert draws.count(MOVES.index("down")) == 0


@pytest.mark.parametrize("rows", [("S.",), ("S.", "GG"), ("S.", "XG"), ("S", "G")])
def test_bad_maps_are_rejected(rows: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        Maze(rows)
