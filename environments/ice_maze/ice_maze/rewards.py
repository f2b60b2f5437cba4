"""Episode state, reward functions and the eval summary of the ice maze."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ice_maze.maze import Maze
from rlvr import Rubric, State, Task, XMLParser
from rlvr.classic import HorizonPlan, plan_horizon
from rlvr.parsers import Parser
from rlvr.types import Messages

PARSER = XMLParser(["think", "move"], optional=["think"])
"""Replies are an optional `<think>...</think>` then `<move>direction</move>`."""


@dataclass(kw_only=True)
class MazeState(State):
    maze: Maze
    position: int
    """Cell index of the agent (row * size + column)."""
    max_moves: int
    """Model turns allowed; invalid replies use them up too."""
    moves: int = 0
    """Valid moves made."""
    slips: int = 0
    """Moves that slid sideways on slippery ice."""
    invalid_moves: int = 0
    """Turns whose reply held no readable move."""

    @property
    def cell(self) -> str:
        return self.maze.cell(self.position)


def _state(rows: tuple[str, ...], position: int, turns: int = 0) -> MazeState:
    """A state for doctests."""
    from rlvr.types import Completion, Turn

    state = MazeState(task=Task(id="t"), maze=Maze(rows), position=position, max_moves=9)
    state.turns = [Turn(Completion(text="")) for _ in range(turns)]
    return state


def goal_reward(state: MazeState) -> float:
    """1 when the agent reached the goal, 0 otherwise (a hole, or out of moves).

    >>> goal_reward(_state(("S.", "HG"), 3)), goal_reward(_state(("S.", "HG"), 2))
    (1.0, 0.0)
    """
    return float(state.cell == "G")


def format_reward(completion: Messages, parser: Parser) -> float:
    """Share of the model's turns that are exactly `[<think>...</think>] <move>...</move>`.

    >>> format_reward([{"role": "assistant", "content": "<move>up</move>"},
    ...                {"role": "assistant", "content": "up"}], PARSER)
    0.5
    """
    return parser.format_reward(completion)


def step_efficiency(state: MazeState) -> float:
    """Shortest path length / turns taken when the goal was reached, else 0 (a metric).

    >>> step_efficiency(_state(("S.", "HG"), 3, turns=4))
    0.5
    """
    if state.cell != "G" or not state.turn:
        return 0.0
    return (state.maze.shortest_path() or 0) / state.turn


def fell_in_hole(state: MazeState) -> float:
    """1 when the episode ended in a hole (a metric).

    >>> fell_in_hole(_state(("S.", "HG"), 2))
    1.0
    """
    return float(state.cell == "H")


def invalid_move_rate(state: MazeState) -> float:
    """Share of turns without a readable move (a metric)."""
    return state.invalid_moves / state.turn if state.turn else 0.0


def make_rubric() -> Rubric:
    """Goal 1.0, format 0.2; step efficiency, holes and invalid moves are logged (weight 0)."""
    return Rubric(
        [goal_reward, format_reward, step_efficiency, fell_in_hole, invalid_move_rate],
        weights=[1.0, 0.2, 0.0, 0.0, 0.0],
        parser=PARSER,
    )


@functools.lru_cache(maxsize=256)
def plan(maze: Maze, max_moves: int) -> HorizonPlan:
    """The exact optimum of a maze within `max_moves` moves (finite-horizon value iteration)."""
    return plan_horizon(maze.transitions(), max_moves)


def optimal_success(maze: Maze, max_moves: int) -> float:
    """Best possible probability of reaching the goal within `max_moves` moves.

    >>> optimal_success(Maze(("S.", "HG")), 2), optimal_success(Maze(("S.", "HG")), 1)
    (1.0, 0.0)
    """
    return plan(maze, max_moves).value(maze.start)


def maze_of(info: dict[str, Any]) -> Maze:
    """The maze a task's info describes."""
    return Maze(tuple(info["rows"]), float(info["slip_prob"]))


def summarize(rollouts: Sequence[Any]) -> dict[str, float] | None:
    """Goal / hole / out-of-moves rates in %, format %, efficiency, and the optimum for these tasks."""
    scored = [r for r in rollouts if r.error is None]
    if not scored:
        return None

    def pct(values: Sequence[float]) -> float:
        return 100.0 * statistics.fmean(values)

    return {
        "goal %": pct([r.rewards.get("goal_reward", 0.0) for r in scored]),
        "hole %": pct([r.rewards.get("fell_in_hole", 0.0) for r in scored]),
        "out of moves %": pct([float(r.stop_reason == "out_of_moves") for r in scored]),
        "format %": pct([r.rewards.get("format_reward", 0.0) for r in scored]),
        "step efficiency": statistics.fmean(r.rewards.get("step_efficiency", 0.0) for r in scored),
        "optimal goal %": pct([optimal_success(maze_of(r.info), int(r.info["max_moves"])) for r in scored]),
    }
