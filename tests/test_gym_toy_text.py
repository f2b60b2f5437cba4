"""FrozenLake and Taxi in words: the state their colours showed is in the text, and players
that read only that text reach the exact optimum (computed from the env's own tables)."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

gymnasium = pytest.importorskip("gymnasium")

from rlvr.classic.value_iteration import evaluate_policy, plan_horizon
from rlvr.engine import run_rollouts
from rlvr.envs.gym import load_environment
from rlvr.envs.gym.toy_text import render_frozen_lake, render_taxi
from rlvr.errors import UsageError
from rlvr.types import Rollout


def play(env, name: str) -> list[Rollout]:
    return asyncio.run(run_rollouts(env, env.policies()[name](), env.tasks()))


# ---- what the text shows --------------------------------------------------------------------


def test_taxi_render_marks_taxi_passenger_and_destination_and_decodes_the_state() -> None:
    env = gymnasium.make("Taxi-v4", render_mode="ansi")
    taxi = env.unwrapped
    text = render_taxi(taxi.encode(2, 2, 3, 0), env)  # taxi mid-map, passenger at B, destination R
    grid = text.splitlines()
    assert grid[1] == "|D: | : :G|" and grid[3] == "| : :T: : |" and grid[5] == "|Y| : |P: |"
    assert "Taxi: row 3, column 3, empty. Passenger: waiting at B (row 5, column 4)." in text
    assert "Destination: R (row 1, column 1). (Observation: 252)" in text
    aboard = render_taxi(taxi.encode(4, 0, 4, 1), env)  # passenger in the taxi at Y, going to G
    assert aboard.splitlines()[1] == "|R: | : :D|" and aboard.splitlines()[5] == "|T| : |B: |"
    assert "carrying the passenger. Passenger: in the taxi. Destination: G" in aboard
    env.close()


def test_frozen_lake_render_marks_the_agent_and_names_the_cell_under_it() -> None:
    env = gymnasium.make("FrozenLake-v1", render_mode="ansi")
    assert render_frozen_lake(5, env) == "SFFF\nF@FH\nFFFH\nHFFG\nYou are at row 2, column 2, on H. (Observation: 5)"
    env.close()


def test_taxi_v3_is_refused_with_gymnasiums_hint() -> None:
    with pytest.raises(UsageError, match="Please use `Taxi-v4` instead"):
        load_environment("Taxi-v3")


# ---- FrozenLake: the optimal player, from the text ------------------------------------------


@pytest.mark.parametrize(("env_id", "optimum"), [("FrozenLake-v1", 0.74419), ("FrozenLake8x8-v1", 0.91322)])
def test_frozen_lake_player_from_the_text_is_exactly_optimal(env_id: str, optimum: float) -> None:
    """No sampling: the player's action for every state and every number of turns left, read
    off the text alone, evaluated exactly on the env's own table, equals the optimum."""
    env = load_environment(env_id, num_tasks=1, max_turns=None)
    lake = gymnasium.make(env_id)
    horizon = env.horizon
    assert horizon == lake.spec.max_episode_steps
    player = env.policies()["optimal"]()
    rules = env.tasks()[0].question.rsplit("\n\n", 1)[0]  # the prompt without its first map
    names = ["left", "down", "right", "up"]

    def action(state: int, left: int) -> int:
        played = [{"role": "user", "content": rules}] if left < horizon else []
        played += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "x"}] * (horizon - left)
        shown = render_frozen_lake(state, lake)
        messages = [*played[:-1], {"role": "user", "content": shown}] if played else []
        messages = messages or [{"role": "user", "content": f"{rules}\n\n{shown}"}]
        reply = asyncio.run(player.chat(messages, env.sampling)).text
        return names.index(reply.removeprefix("<action>").removesuffix("</action>"))

    played = evaluate_policy(lake.unwrapped.P, action, horizon)[0]
    assert played == pytest.approx(plan_horizon(lake.unwrapped.P, horizon).value(0), abs=1e-12)
    assert played == pytest.approx(optimum, abs=1e-5)
    lake.close()


def test_frozen_lake_player_reaches_the_optimal_success_rate_over_100_episodes() -> None:
    env = load_environment("FrozenLake-v1", num_tasks=100)
    lake = gymnasium.make("FrozenLake-v1")
    optimum = plan_horizon(lake.unwrapped.P, 100).value(0)  # 0.7413 (slippery 4x4, 100 steps)
    rollouts = play(env, "optimal")
    mean = sum(r.reward for r in rollouts) / len(rollouts)
    assert all(r.error is None and r.rewards["invalid_action_rate"] == 0 for r in rollouts)
    assert abs(mean - optimum) < 0.13, (mean, optimum)  # 3 standard errors of 100 episodes
    lake.close()


def test_frozen_lake_player_walks_a_shortest_path_on_firm_ice() -> None:
    env = load_environment("FrozenLake8x8-v1", num_tasks=3, env_kwargs={"is_slippery": False})
    assert all(r.reward == 1.0 and len(r.turns) == 14 for r in play(env, "optimal"))


# ---- Taxi: a planner, from the text ---------------------------------------------------------


def optimal_taxi_return(table, state: int) -> float:
    """Breadth-first search over Taxi's own transition table: 20 minus the steps before the last."""
    seen, queue = {state}, deque([(state, 0)])
    while queue:
        s, steps = queue.popleft()
        for outcomes in table[s].values():
            ((_, t, reward, done),) = outcomes
            if done:
                return reward - steps
            if t not in seen:
                seen.add(t)
                queue.append((t, steps + 1))
    raise AssertionError("no delivery reachable")


def test_taxi_planner_reaches_the_optimal_return_on_every_one_of_100_episodes() -> None:
    env = load_environment("Taxi-v4", num_tasks=100)
    taxi = gymnasium.make("Taxi-v4")
    starts = [taxi.reset(seed=t.seed)[0] for t in env.tasks()]
    optimum = [optimal_taxi_return(taxi.unwrapped.P, s) for s in starts]
    rollouts = play(env, "planner")
    assert [r.reward for r in rollouts] == optimum
    assert all(r.stop_reason == "terminated" and r.rewards["invalid_action_rate"] == 0 for r in rollouts)
    assert 7.0 < sum(optimum) / 100 < 9.5  # the known mean optimum of Taxi, about 8
    taxi.close()
