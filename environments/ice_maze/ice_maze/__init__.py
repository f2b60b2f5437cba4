"""The ice maze: a FrozenLake-style grid for rlvr, as an LLM environment (`load_environment`),
a Gymnasium env (`ice_maze.gym`, needs gymnasium) and a tabular RL testbed (`Maze.transitions`)."""

from ice_maze.env import IceMazeEnv, load_environment
from ice_maze.maze import MOVES, Maze, generate_maze
from ice_maze.rewards import MazeState, optimal_success

__all__ = [
    "MOVES",
    "IceMazeEnv",
    "Maze",
    "MazeState",
    "generate_maze",
    "load_environment",
    "optimal_success",
]
