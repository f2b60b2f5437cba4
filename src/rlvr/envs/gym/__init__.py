"""Gymnasium, both ways (needs the `gym` extra).

- `GymEnv` (`env.py`): any Gymnasium env played by a model, through text; `load_environment`
  is the bundled `gym` environment (``rlvr eval gym -a '{"env_id": "Taxi-v4"}'``).
- `spaces.py`: action spaces as text (Discrete by name or number; Box, MultiDiscrete,
  MultiBinary and Tuple as JSON).
- `toy_text.py`: FrozenLake, Taxi, Blackjack and CliffWalking in words (their colours as
  letters, their observations decoded, their rules); `classic_control.py`: CartPole,
  MountainCar (both), Acrobot and Pendulum with each field named, the goal and the reward rule;
  `players.py`: reference players that read only that text.
- `adapter.py`: the other direction, any rlvr env as a Gymnasium env with text observations
  and text actions (imported on its own: it subclasses ``gymnasium.Env``).
"""

from rlvr.envs.gym.env import (
    KNOWN_ACTIONS,
    ActionParser,
    GymEnv,
    GymState,
    Renderer,
    default_renderer,
    episode_return,
    format_reward,
    gymnasium_module,
    invalid_action_rate,
    load_environment,
)

__all__ = [
    "KNOWN_ACTIONS",
    "ActionParser",
    "GymEnv",
    "GymState",
    "Renderer",
    "default_renderer",
    "episode_return",
    "format_reward",
    "gymnasium_module",
    "invalid_action_rate",
    "load_environment",
]
