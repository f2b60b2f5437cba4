"""Tabular Q-learning on an ice maze, compared with the value-iteration optimum.

    pip install -e '.[gym,plot]' -e environments/ice_maze
    python examples/ice_maze_qlearning.py                      # 5x5 slippery map, seed 0
    python examples/ice_maze_qlearning.py --size 8 --map-seed 2 --no-slippery

Prints the map, the optimal success probability within the move limit (finite-horizon value
iteration), what the learnt greedy policy achieves (exactly, and over seeded episodes), and
writes the learning curve to runs/ice_maze_qlearning.png. On slippery ice the agent keeps a
Q table per number of moves left (see docs/classic_rl.md for why).
"""

from __future__ import annotations

import argparse
import time

from ice_maze.gym import IceMazeGymEnv

from rlvr.classic import (
    QLearningConfig,
    evaluate,
    evaluate_policy,
    plan_horizon,
    plot_learning_curve,
    q_learning,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=5, help="side of the square map, 2..8 (default 5)")
    p.add_argument("--map-seed", type=int, default=0, help="seed of the map (default 0)")
    p.add_argument("--slippery", action=argparse.BooleanOptionalAction, default=True,
                   help="slippery ice (default on)")
    p.add_argument("--slip-prob", type=float, default=0.2, help="chance of sliding sideways (default 0.2)")
    p.add_argument("--episodes", type=int, default=6000, help="training episodes (default 6000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the learner (default 0)")
    p.add_argument("--out", default="runs/ice_maze_qlearning.png", help="where to write the plot")
    args = p.parse_args()

    env = IceMazeGymEnv(size=args.size, map_seed=args.map_seed, slippery=args.slippery,
                        slip_prob=args.slip_prob)
    model, horizon, start = env.maze.transitions(), env.max_steps, env.maze.start
    optimum = plan_horizon(model, horizon).value(start)
    print(env.maze.render(start), f"\n{args.size}x{args.size}, slip {env.maze.slip_prob}, {horizon} moves")
    print(f"optimal success probability (value iteration): {optimum:.4f}")

    if args.slippery:  # success within the move limit depends on the moves left: one table per count
        config = QLearningConfig(
            episodes=args.episodes, horizon=horizon, discount=1.0, learning_rate=0.3,
            learning_rate_end=0.01, initial_q=1.0, epsilon_end=0.2, explore_fraction=0.3, seed=args.seed,
        )
    else:  # the classic agent: one stationary table, discounted, optimistic start
        config = QLearningConfig(episodes=args.episodes, initial_q=1.0, seed=args.seed)
    t0 = time.monotonic()
    result = q_learning(env, config)
    seconds = time.monotonic() - t0
    exact = evaluate_policy(model, result.act, horizon)[start]
    sampled = evaluate(env, result.act, 5000, seed=1, horizon=config.horizon)
    print(f"Q-learning, {args.episodes} episodes in {seconds:.1f}s: success {exact:.4f} exactly, "
          f"{sampled:.4f} over 5000 seeded episodes (gap to the optimum {optimum - exact:+.4f})")
    title = f"Q-learning on a {args.size}x{args.size} {'slippery ' if args.slippery else ''}ice maze"
    print("plot:", plot_learning_curve(result, args.out, optimum=optimum, title=title,
                                              ylabel="success rate (return)"))


if __name__ == "__main__":
    main()
