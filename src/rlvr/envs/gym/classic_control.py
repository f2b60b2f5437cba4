"""Gymnasium's classic-control envs in words: each observation's fields by name, the goal and
the reward rule, read from the env's own constants where it has them.

Their observations are bare vectors (``[0.0266, 0.0031, -0.0110, 0.0181]``), which say nothing
to a model that has not read Gymnasium's source. Here each is labelled:

    Cart position: 0.0266 (the episode fails beyond ±2.4). Cart velocity: 0.0031. Pole angle:
    -0.0110 rad (fails beyond ±0.2094). Pole angular velocity: 0.0181. (Observation: [...])

`RULES`, `RENDERERS` and `ACTION_NAMES` are keyed by the class name of the unwrapped env, like
`toy_text`'s, so ``gym.make("CartPole-v1")`` and a ``GymEnv`` built by hand get them alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

Renderer = Callable[[Any, Any], str]


def _labelled(observation: Any, labels: Sequence[str]) -> str:
    """Each value after its label (4 decimals), then the raw observation.

    >>> _labelled([0.5, -0.25], ["Position", "Velocity"])
    'Position: 0.5000. Velocity: -0.2500. (Observation: [0.5, -0.25])'
    """
    values = [float(v) for v in observation]
    parts = [label.format(value=v) if "{value" in label else f"{label}: {v:.4f}" for label, v in zip(labels, values)]
    return ". ".join(parts) + f". (Observation: {values})"


# ---- CartPole -------------------------------------------------------------------------------


def cart_pole_rules(env: Any) -> str:
    pole = env.unwrapped
    reward = (
        "Reward: 0 each step, -1 when the pole falls or the cart leaves the track."
        if getattr(pole, "_sutton_barto_reward", False)
        else "Reward: +1 for every step, the last one included: the longer the pole stays up, the more."
    )
    return (
        "A pole stands on a cart that moves along a track without friction. Each turn you push the cart "
        f"left or right with a fixed force ({pole.force_mag:g} N). Keep the pole upright: the episode ends "
        f"when the pole leans more than {math.degrees(pole.theta_threshold_radians):.4g} degrees "
        f"({pole.theta_threshold_radians:.4f} rad) from vertical or the cart moves more than "
        f"{pole.x_threshold:g} from the centre. A positive angle leans right; pushing the cart under the "
        f"pole's lean (right when it leans right) rights it. {reward}"
    )


def render_cart_pole(observation: Any, env: Any) -> str:
    pole = env.unwrapped
    return _labelled(
        observation,
        [
            f"Cart position: {{value:.4f}} (the episode fails beyond ±{pole.x_threshold:g})",
            "Cart velocity",
            f"Pole angle: {{value:.4f}} rad (fails beyond ±{pole.theta_threshold_radians:.4f})",
            "Pole angular velocity",
        ],
    )


# ---- MountainCar, discrete and continuous ---------------------------------------------------


def _valley(car: Any) -> str:
    return (
        f"A car sits in a valley on a track from {car.min_position:g} (left) to {car.max_position:g} "
        f"(right); the valley's bottom is near -0.52 and the goal is the hilltop at position "
        f"{car.goal_position:g} or beyond on the right. The engine is too weak to climb straight up: "
        "swing back and forth to build momentum (pushing the way the car already moves adds energy). "
        f"Velocity stays within ±{car.max_speed:g}; the left end is a wall that stops the car."
    )


def mountain_car_rules(env: Any) -> str:
    car = env.unwrapped
    return (
        f"{_valley(car)} Each turn accelerate left, none or right (a force of {car.force:g}, against "
        f"gravity {car.gravity:g}). Reward: -1 every step until the car reaches the goal, which ends "
        "the episode: the sooner, the better."
    )


def mountain_car_continuous_rules(env: Any) -> str:
    car = env.unwrapped
    return (
        f"{_valley(car)} Each turn push with a force between {car.min_action:g} and {car.max_action:g} "
        f"(negative left, positive right; scaled by {car.power:g}). Reward: -0.1 x force² every step, "
        "+100 on reaching the goal, which ends the episode."
    )


def render_mountain_car(observation: Any, env: Any) -> str:
    car = env.unwrapped
    return _labelled(
        observation,
        [f"Position: {{value:.4f}} (goal: {car.goal_position:g} or more)", "Velocity: {value:.5f}"],
    )


# ---- Acrobot --------------------------------------------------------------------------------


def acrobot_rules(env: Any) -> str:
    return (
        "Two links hang in a chain from a fixed joint; only the joint between them has a motor. Each turn "
        "apply a torque of -1 (negative), 0 (none) or +1 (positive) to it. Goal: swing the free end above "
        "the height of one link length over the fixed joint, i.e. -cos(angle 1) - cos(angle 1 + angle 2) > 1 "
        "(angle 1 is the first link's angle from hanging straight down, angle 2 the second link's angle "
        "relative to the first). Reward: -1 every step until the goal is reached, 0 on the step that "
        "reaches it, which ends the episode."
    )


def render_acrobot(observation: Any, env: Any) -> str:
    cos1, sin1, cos2, sin2 = (float(v) for v in observation[:4])
    height = -cos1 - (cos1 * cos2 - sin1 * sin2)  # -cos(a1) - cos(a1 + a2)
    text = _labelled(
        observation,
        ["cos(angle 1)", "sin(angle 1)", "cos(angle 2)", "sin(angle 2)", "Angular velocity 1", "Angular velocity 2"],
    )
    return f"{text}\nHeight of the free end: {height:.4f} (goal: above 1)."


# ---- Pendulum -------------------------------------------------------------------------------


def pendulum_rules(env: Any) -> str:
    pendulum = env.unwrapped
    return (
        "A pendulum swings about a fixed pivot; angle 0 is upright, and a positive torque turns it toward "
        f"positive angles. Each turn apply a torque between -{pendulum.max_torque:g} and {pendulum.max_torque:g} to it (the angular "
        f"velocity stays within ±{pendulum.max_speed:g}). Goal: swing it up and hold it upright. Reward "
        "each step: -(angle² + 0.1 x angular velocity² + 0.001 x torque²), the angle in radians within "
        "[-pi, pi]: 0 at best, about -16.3 at worst. The episode never ends early; it runs to its time limit."
    )


def render_pendulum(observation: Any, env: Any) -> str:
    cos, sin, _ = (float(v) for v in observation)
    text = _labelled(observation, ["cos(angle)", "sin(angle)", "Angular velocity"])
    return f"{text}\nAngle: {math.atan2(sin, cos):.4f} rad from upright."


RULES: dict[str, Callable[[Any], str]] = {
    "CartPoleEnv": cart_pole_rules,
    "MountainCarEnv": mountain_car_rules,
    "Continuous_MountainCarEnv": mountain_car_continuous_rules,
    "AcrobotEnv": acrobot_rules,
    "PendulumEnv": pendulum_rules,
}
"""The rules of a known env, by the class name of the unwrapped env."""
RENDERERS: dict[str, Renderer] = {
    "CartPoleEnv": render_cart_pole,
    "MountainCarEnv": render_mountain_car,
    "Continuous_MountainCarEnv": render_mountain_car,
    "AcrobotEnv": render_acrobot,
    "PendulumEnv": render_pendulum,
}
"""Observation renderers of known envs, by the class name of the unwrapped env."""
ACTION_NAMES: dict[str, list[str]] = {
    "CartPoleEnv": ["left", "right"],
    "MountainCarEnv": ["left", "none", "right"],
    "AcrobotEnv": ["negative", "none", "positive"],
}
"""Action names of the Discrete ones, by the class name of the unwrapped env."""
