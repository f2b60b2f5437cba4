"""The ice maze as an LLM environment: the model crosses a frozen lake, one move per turn.

Dataset: a pure function of the arguments. Task `i` of a split gets a seed mixed from
(seed, split, i); the seed draws the side length (when `size` is not fixed) and the map, which
always has a path from S to G (`generate_maze`). The prompt shows the grid, the agent's row and
column, and the moves left; the map itself is kept in the task's info (`rows`, `slip_prob`,
`max_moves`), so results files say exactly what was played.

Episode: each reply is read for `<move>up|down|left|right</move>`. A reply without a readable
move wastes the turn (the grid is shown again with a one-line error). On slippery ice a move
slides sideways with probability `slip_prob`, drawn from an RNG seeded by (rollout seed, turn):
a rollout is reproducible, and the rollouts of one group meet different ice. The episode ends
on the goal (`reached_goal`) or in a hole (`fell_in_hole`), both *terminated*, or when the
moves run out (`out_of_moves`, *truncated*).

Reference players (`-m policy:NAME`): `optimal` plays the finite-horizon value-iteration plan
for the moves left (exactly optimal, in expectation on slippery ice); `random` picks a
uniformly random direction.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from ice_maze.maze import MAX_SIZE, MIN_SIZE, MOVES, Maze, generate_maze
from ice_maze.rewards import PARSER, MazeState, make_rubric, maze_of, plan, summarize
from rlvr import ChatClient, MultiTurnEnv, Policy, Task, stop
from rlvr.deprecation import renamed_arguments
from rlvr.seeding import mix_seed
from rlvr.types import Messages

SPLITS = ("train", "eval")
SLIP_STREAM = 0x51_1DE
"""Mixed into the slip RNG's seed so that slips never share a stream with a policy's RNG."""

SYSTEM_PROMPT = """You are crossing a frozen lake drawn as a grid, one move per turn.

On every turn, you may think briefly inside <think>...</think>, then give one move inside
<move>...</move>: up, down, left or right. For example:
<think>The hole is to my right, so I go down first.</think>
<move>down</move>
Reply with these blocks and nothing else. A reply without a readable move wastes the turn."""

_POSITION = re.compile(r"You are at row (\d+), column (\d+)")


# ---- texts ----------------------------------------------------------------------------------


def position_line(maze: Maze, position: int, moves_left: int) -> str:
    """The status line under the grid (the `optimal` player reads the row and column back)."""
    row, col = maze.coordinates(position)
    return f"You are at row {row}, column {col}. Moves left: {moves_left}."


def task_text(maze: Maze, max_moves: int) -> str:
    """The opening user turn: rules, grid, position."""
    n = maze.size
    lines = [
        f"The lake is a {n}x{n} grid: S is the start, G the goal, H a hole, . solid ice and @ you."
        + " Rows count from the top, columns from the left.",
        "Reach G without stepping into a hole. Moving against the edge of the grid leaves you in place.",
    ]
    if maze.slip_prob:
        keep, side = round(100 * (1 - maze.slip_prob)), round(50 * maze.slip_prob)
        lines.append(
            f"The ice is slippery: a move goes the way you chose with probability {keep}%; "
            f"otherwise you slide at a right angle to it ({side}% to each side)."
        )
    lines.append(f"You have {max_moves} moves.")
    status = position_line(maze, maze.start, max_moves)
    return "\n".join(lines) + f"\n\n{maze.render(maze.start)}\n\n{status}"


def read_move(text: str) -> tuple[int | None, str | None]:
    """(action, None) for a readable move, else (None, a one-line reason).

    >>> read_move("<think>go</think><move> Left </move>")
    (2, None)
    >>> read_move("<move>north</move>")
    (None, "'north' is not a move; answer with <move>up</move>, down, left or right")
    """
    move = PARSER.parse(text).last("move")
    if move is None:
        return None, "no <move>...</move> found; answer with <move>up</move>, down, left or right"
    if move.strip().lower() not in MOVES:
        return None, f"{move[:40]!r} is not a move; answer with <move>up</move>, down, left or right"
    return MOVES.index(move.strip().lower()), None


# ---- the environment ------------------------------------------------------------------------


class IceMazeEnv(MultiTurnEnv[MazeState]):
    """See the module docstring."""

    def __init__(self, dataset: Sequence[Task], **kwargs: Any) -> None:
        super().__init__(dataset, system_prompt=SYSTEM_PROMPT, parser=PARSER, rubric=make_rubric(), **kwargs)
        self._by_text: dict[str, Task] | None = None

    def setup_state(self, task: Task) -> MazeState:
        maze = maze_of(dict(task.info))
        return MazeState(task=task, maze=maze, position=maze.start, max_moves=int(task.info["max_moves"]))

    async def env_response(self, messages: Messages, state: MazeState) -> Messages:
        action, error = read_move(state.turns[-1].completion.text)
        maze = state.maze
        if action is None:
            state.invalid_moves += 1
            head = f"Invalid move: {error}. The turn is lost."
        else:
            u = random.Random(mix_seed(state.seed, SLIP_STREAM, state.turn)).random()
            direction = maze.slide(action, u)
            target = maze.move(state.position, direction)
            state.moves += 1
            if direction != action:
                state.slips += 1
                head = f"You tried to move {MOVES[action]} but slid {MOVES[direction]} on the ice."
            else:
                head = f"You moved {MOVES[action]}."
            if target == state.position:
                head += " You bumped into the edge and stayed where you were."
            state.position = target
        left = state.max_moves - state.turn
        if state.cell == "G":
            tail = "You reached the goal!"
        elif state.cell == "H":
            tail = "You fell into a hole. The game is over."
        else:
            tail = position_line(maze, state.position, left)
            if left == 0:
                tail += " You are out of moves."
        return [{"role": "user", "content": f"{head}\n\n{maze.render(state.position)}\n\n{tail}"}]

    @stop
    def reached_goal(self, state: MazeState) -> bool:
        return state.cell == "G"

    @stop
    def fell_in_hole(self, state: MazeState) -> bool:
        return state.cell == "H"

    @stop(priority=-100, truncated=True)
    def out_of_moves(self, state: MazeState) -> bool:
        return state.awaiting_model and state.turn >= state.max_moves

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        return summarize(rollouts)

    # ---- reference players ------------------------------------------------------------------

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return {
            "optimal": lambda: Policy(self.optimal_reply, name="optimal"),
            "random": lambda: Policy(random_reply, name="random"),
        }

    def optimal_reply(self, messages: Messages, rng: random.Random) -> str:
        """The move of the finite-horizon optimal plan for the position and moves left."""
        task = self._task_of(messages)
        maze, max_moves = maze_of(dict(task.info)), int(task.info["max_moves"])
        found = None
        for m in reversed(messages):
            if m.get("role") == "user" and (found := _POSITION.search(str(m.get("content") or ""))):
                break
        if found is None:
            raise ValueError("no 'You are at row R, column C' line in the conversation")
        position = (int(found.group(1)) - 1) * maze.size + int(found.group(2)) - 1
        moves_left = max_moves - sum(m.get("role") == "assistant" for m in messages)
        action = plan(maze, max_moves).action(position, max(moves_left, 1))
        return f"<move>{MOVES[action]}</move>"

    def _task_of(self, messages: Messages) -> Task:
        if self._by_text is None:
            tasks = list(self.dataset) + list(self.eval_dataset or [])
            self._by_text = {str(t.question): t for t in tasks}
        first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        if first not in self._by_text:
            raise ValueError("policy:optimal plays only this environment's own tasks; this prompt is not one of them")
        return self._by_text[first]


def random_reply(messages: Messages, rng: random.Random) -> str:
    """A uniformly random direction."""
    return f"<move>{rng.choice(MOVES)}</move>"


# ---- dataset and entry point ----------------------------------------------------------------


def make_task(
    split: str,
    index: int,
    seed: int,
    *,
    size: int | None,
    min_size: int,
    max_size: int,
    slip_prob: float,
    hole_prob: float,
    max_turns: int | None,
) -> Task:
    """Task `index` of `split`: a pure function of its arguments."""
    task_seed = mix_seed(seed, SPLITS.index(split), index)
    n = size if size is not None else random.Random(task_seed).randint(min_size, max_size)
    maze = generate_maze(n, mix_seed(task_seed, 1), hole_prob=hole_prob, slip_prob=slip_prob)
    max_moves = max_turns if max_turns is not None else n * n
    info = {
        "rows": list(maze.rows),
        "size": n,
        "slip_prob": slip_prob,
        "max_moves": max_moves,
        "shortest_path": maze.shortest_path(),
    }
    return Task(id=f"{split}-{index}", question=task_text(maze, max_moves), info=info, seed=task_seed)


@renamed_arguments(num_examples="num_tasks", eval_examples="eval_tasks")
def load_environment(
    num_tasks: int = 200,
    eval_tasks: int = 50,
    seed: int = 0,
    size: int | None = None,
    min_size: int = 4,
    max_size: int = 6,
    slippery: bool = False,
    slip_prob: float = 0.2,
    hole_prob: float = 0.2,
    max_turns: int | None = None,
) -> IceMazeEnv:
    """Build the environment; every argument is documented in the package README."""
    for name, value in (("num_tasks", num_tasks), ("eval_tasks", eval_tasks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    low, high = (size, size) if size is not None else (min_size, max_size)
    if not MIN_SIZE <= low <= high <= MAX_SIZE:
        raise ValueError(f"sizes must satisfy {MIN_SIZE} <= min_size <= max_size <= {MAX_SIZE}, got {low} and {high}")
    if slippery and not 0.0 < slip_prob < 1.0:
        raise ValueError(f"slip_prob must be in (0, 1) on slippery ice, got {slip_prob}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 or null, got {max_turns}")
    options: dict[str, Any] = {
        "size": size,
        "min_size": min_size,
        "max_size": max_size,
        "hole_prob": hole_prob,
        "slip_prob": slip_prob if slippery else 0.0,
        "max_turns": max_turns,
    }

    def split(name: str, n: int) -> list[Task]:
        return [make_task(name, i, seed, **options) for i in range(n)]

    return IceMazeEnv(split("train", num_tasks), eval_dataset=split("eval", eval_tasks))
