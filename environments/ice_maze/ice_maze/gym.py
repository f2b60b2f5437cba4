"""The ice maze as a Gymnasium environment (needs gymnasium: ``pip install 'rlvr[gym]'``).

Importing this module registers ``IceMaze-v0``, so both of these work::

    import gymnasium as gym
    env = gym.make("ice_maze.gym:IceMaze-v0", size=6, map_seed=3, slippery=True)

    from ice_maze.gym import IceMazeGymEnv
    env = IceMazeGymEnv(size=6, map_seed=3, slippery=True)

Observation: the agent's cell index ``row * size + column`` (``Discrete(size * size)``).
Action: 0..3 = up, down, left, right (``Discrete(4)``). Reward 1 on reaching the goal, else 0.
`terminated` on a hole or the goal; `truncated` after `max_steps` steps (default ``size**2``,
the same budget as the LLM environment's moves). Slips are drawn from the env's seeded
``np_random``, so ``reset(seed=...)`` makes an episode reproducible. ``render_mode="ansi"``
returns the text grid the LLM environment shows.

``IceMazeText-v0`` is the LLM view instead, through rlvr's generic adapter
(`rlvr.envs.gym.adapter.TextGymEnv`): text observations (the prompts), text actions
(``<move>up</move>``), the reward at the end. ``IceMaze-v0`` stays hand-written because it is a
different env: integer observations and actions, for tabular agents such as Q-learning.
"""

from __future__ import annotations

from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the ice maze Gymnasium env needs gymnasium: pip install 'rlvr[gym]'") from exc

from ice_maze.maze import MOVES, Maze, generate_maze

ENV_ID = "IceMaze-v0"
TEXT_ENV_ID = "IceMazeText-v0"
DEFAULT_SLIP_PROB = 0.2


class IceMazeGymEnv(gymnasium.Env):  # type: ignore[type-arg]
    """One fixed map (from `map_seed`, or `maze`), episodes reset to its start cell."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012 (Gymnasium's convention)

    def __init__(
        self,
        size: int = 4,
        map_seed: int = 0,
        slippery: bool = False,
        slip_prob: float = DEFAULT_SLIP_PROB,
        hole_prob: float = 0.2,
        max_steps: int | None = None,
        maze: Maze | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        slip = slip_prob if slippery else 0.0
        self.maze = maze or generate_maze(size, map_seed, hole_prob=hole_prob, slip_prob=slip)
        self.max_steps = max_steps if max_steps is not None else self.maze.num_states
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(self.maze.num_states)
        self.action_space = spaces.Discrete(len(MOVES))
        self.position = self.maze.start
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self.position, self.steps = self.maze.start, 0
        return self.position, {"steps": 0}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an int in 0..3 ({', '.join(MOVES)}), got {action!r}")
        if self.maze.is_terminal(self.position):
            raise RuntimeError("the episode is over: call reset() before step()")
        direction = self.maze.slide(int(action), float(self.np_random.random()))
        self.position = self.maze.move(self.position, direction)
        self.steps += 1
        cell = self.maze.cell(self.position)
        terminated = cell in "HG"
        truncated = not terminated and self.steps >= self.max_steps
        info = {"steps": self.steps, "slipped": direction != int(action)}
        return self.position, float(cell == "G"), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self.maze.render(self.position) + "\n"


def make_text_env(render_mode: str | None = None, **env_args: Any) -> gymnasium.Env:  # type: ignore[type-arg]
    """The LLM environment (`load_environment(**env_args)`) as a text Gymnasium env."""
    from ice_maze.env import load_environment
    from rlvr.envs.gym.adapter import TextGymEnv

    return TextGymEnv(load_environment(**env_args), render_mode=render_mode)


def register() -> None:
    """Register ``IceMaze-v0`` and ``IceMazeText-v0`` with Gymnasium (idempotent; importing
    this module does it)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="ice_maze.gym:IceMazeGymEnv")
    if TEXT_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=TEXT_ENV_ID, entry_point="ice_maze.gym:make_text_env")


register()
