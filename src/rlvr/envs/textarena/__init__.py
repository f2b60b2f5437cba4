"""TextArena games as rlvr environments (needs the `textarena` extra).

TextArena (https://github.com/LeonGuertler/TextArena) is a collection of ~100 text games,
single-player puzzles and two-player (or more) games. The `textarena` environment plays one
of them: ``rlvr eval textarena -a '{"game": "KuhnPoker-v0", "opponent": "never_fold"}'``.

- Task i is the game reset with seed ``mix_seed(seed, i)`` (TextArena seeds the module-level
  `random`; each rollout draws from a `random` state of its own, seeded from the task for the
  opening and from the rollout seed after it, so runs are reproducible and concurrent games do
  not share a stream). The model plays seat `seat` (player 0 by default).
- The other seats are played inside the env by `opponent`: a reference player (`random`, or a
  game's own player below), `self` (the same client as the model: self-play), or a second model
  (`opponent_model`, e.g. ``policy:optimal``, a local folder or an API model name). Each seat
  sees its own conversation: the game's rules, then what happened since its last move.
- The game's own text and move format (a move in square brackets) are kept, and so is its
  handling of a bad move: TextArena warns once and ends the game with a loss at the second
  illegal move in a row (`invalid_moves` counts the model's).
- The players a game is played by come from the game (its default, else the fewest it
  accepts and keeps on reset); a game that cannot load here (Python 3.12 syntax, NLTK data
  or an OpenRouter key it fetches, a missing file or package) is refused with the reason.
- Budgets: the other seats get as many moves each as the model's `max_turns`; a game they
  have not ended by then is cut off (`others_out_of_moves`, a loss). TextArena's synchronous
  reset / step run in a worker thread with a deadline (`step_timeout_s`; `steps`).
- Rewards: `outcome_reward` (weight 1) maps the game's result for the model's seat to 1 / 0.5
  / 0 for win / draw / loss (single-player: 1 when the game's reward is 1); a game cut off by
  `max_turns` is a loss, and so is a reward that is not a number (a game that hands its
  reason over as the reward; the reason is kept). `game_reward` keeps the game's own reward
  (e.g. GuessTheNumber's closeness), `invalid_moves` the refused moves; both weight 0.

Reference players (`-m policy:NAME`, or `opponent=NAME`): `random` (any game: a listed
move, a number in the stated range, or a move the rules quote), GuessTheNumber
`bisect`, TicTacToe `optimal`, KuhnPoker `never_fold` (`rlvr.envs.textarena.players`). Their
measured scores are in docs/environments.md.
"""

from rlvr.envs.textarena.env import ArenaState, TextArenaEnv, load_environment
from rlvr.envs.textarena.games import textarena_module

__all__ = ["ArenaState", "TextArenaEnv", "load_environment", "textarena_module"]
