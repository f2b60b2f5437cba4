"""Gymnasium's toy-text envs in words: their rules, and their state without colours.

Gymnasium's ``ansi`` renders mark the FrozenLake agent and Taxi's passenger and destination
only by colour, which a text model never sees (`default_renderer` strips the escape codes).
Here every piece of state is a letter on the map and a sentence under it, decoded from the
observation (CliffWalking's render gains a start, a goal and a legend):

    FrozenLake: S@FF           Taxi: +---------+
                FHFH                 |D: | : :G|
                FFFH                 | : | : : |
                HFFG                 | : :T: : |
                You are at row 1,    ...
                column 2, on F.      Taxi: row 3, column 3, empty. Passenger: waiting at B ...

`RULES` and `RENDERERS` are keyed by the class name of the unwrapped env, so they apply to
``gym.make("Taxi-v4")`` and to a ``GymEnv`` built by hand alike. `KNOWN_ACTIONS` names the
actions of each, by id prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KNOWN_ACTIONS: dict[str, list[str]] = {
    "FrozenLake": ["left", "down", "right", "up"],
    "CliffWalking": ["up", "right", "down", "left"],
    "Taxi": ["south", "north", "east", "west", "pickup", "dropoff"],
    "Blackjack": ["stick", "hit"],
}
"""Action names of Gymnasium's toy-text environments, by id prefix."""

STOPS = "RGYB"
"""Taxi's four stops, in the order of its passenger and destination indices."""


def _cells(desc: Any) -> list[list[str]]:
    return [[c.decode() if isinstance(c, bytes) else str(c) for c in row] for row in desc]


# ---- FrozenLake -----------------------------------------------------------------------------


def lake_dynamics(env: Any) -> tuple[float, dict[str, float]]:
    """(probability a move goes the chosen way, reward on entering each kind of cell), read
    from the env's transition table."""
    lake = env.unwrapped
    cells = [c for row in _cells(lake.desc) for c in row]
    start = cells.index("S")
    outcomes = lake.P[start][0]
    success = outcomes[1][0] if len(outcomes) == 3 else 1.0
    rewards = {"G": 1.0, "H": 0.0, "F": 0.0}
    for source, row in lake.P.items():
        if cells[source] in "GH":  # terminal: its self-loops carry no reward
            continue
        for transitions in row.values():
            for p, target, reward, _ in transitions:
                if p > 0 and cells[target] in "GHF":
                    rewards[cells[target]] = float(reward)
    return float(success), rewards


def frozen_lake_rules(env: Any) -> str:
    success, rewards = lake_dynamics(env)
    side = (1.0 - success) / 2
    ice = (
        f"The ice is slippery: a move goes the chosen way with probability {success:.6g}, otherwise it "
        f"slides at a right angle ({side:.6g} to each side)."
        if success < 1.0
        else "The ice is not slippery: every move goes the chosen way."
    )
    return (
        "The lake is a grid: S is the start, F frozen ice, H a hole, G the goal and @ you. Rows count "
        "from the top, columns from the left. A move goes one cell; moving against the edge leaves you "
        f"in place. {ice} Reaching G or falling into H ends the episode. Rewards: {rewards['G']:g} for "
        f"reaching G, {rewards['H']:g} for falling into H, {rewards['F']:g} for any other move."
    )


def render_frozen_lake(observation: Any, env: Any) -> str:
    cells = _cells(env.unwrapped.desc)
    ncol = len(cells[0])
    row, col = divmod(int(observation), ncol)
    under = cells[row][col]
    cells[row][col] = "@"
    grid = "\n".join("".join(r) for r in cells)
    return f"{grid}\nYou are at row {row + 1}, column {col + 1}, on {under}. (Observation: {int(observation)})"


# ---- Taxi -----------------------------------------------------------------------------------


def taxi_rules(env: Any) -> str:
    taxi = env.unwrapped
    rain = ""
    some_move = taxi.P[0][0]
    if len(some_move) > 1:
        keep = max(p for p, *_ in some_move)
        rain = f" It rains: a move goes the chosen way with probability {keep:.6g}, otherwise sideways."
    if getattr(taxi, "fickle_passenger", False):
        rain += " The passenger may change destination once, after the first move with them aboard."
    return (
        "The map is a 5x5 grid of cells between the borders: T is the taxi, P the passenger waiting, D "
        "the destination; R, G, Y and B are the four stops. A '|' between two cells is a wall the taxi "
        "cannot cross; ':' is open. Rows count from the top, columns from the left. Drive to the "
        "passenger, pickup, drive to the destination, dropoff."
        f"{rain} Rewards: -1 per action, +20 for delivering the passenger (which ends the episode), "
        "-10 for a pickup or dropoff in the wrong place."
    )


def render_taxi(observation: Any, env: Any) -> str:
    taxi = env.unwrapped
    row, col, passenger, destination = (int(v) for v in taxi.decode(int(observation)))
    cells = _cells(taxi.desc)
    locs = [(int(r), int(c)) for r, c in taxi.locs]

    def mark(r: int, c: int, letter: str) -> None:
        cells[1 + r][2 * c + 1] = letter

    mark(*locs[destination], "D")
    if passenger < len(locs):
        mark(*locs[passenger], "P")
    mark(row, col, "T")

    def where(index: int) -> str:
        r, c = locs[index]
        return f"{STOPS[index]} (row {r + 1}, column {c + 1})"

    aboard = passenger == len(locs)
    status = [
        f"Taxi: row {row + 1}, column {col + 1}, {'carrying the passenger' if aboard else 'empty'}.",
        "Passenger: in the taxi." if aboard else f"Passenger: waiting at {where(passenger)}.",
        f"Destination: {where(destination)}.",
    ]
    grid = "\n".join("".join(r) for r in cells)
    return f"{grid}\n" + " ".join(status) + f" (Observation: {int(observation)})"


# ---- CliffWalking ---------------------------------------------------------------------------


def cliff_walking_rules(env: Any) -> str:
    walk = env.unwrapped
    nrow, ncol = (int(n) for n in walk.shape)
    slip = (
        " The ground is slippery: a move goes the chosen way with probability 1/3, otherwise one of the "
        "two moves at a right angle (1/3 each)."
        if getattr(walk, "is_slippery", False)
        else ""
    )
    return (
        f"The map is a {nrow}x{ncol} grid: @ is you, S the start (bottom left), G the goal (bottom right), "
        "C the cliff (the bottom row between them), o open ground. Rows count from the top, columns from "
        "the left. A move goes one cell; moving against the edge leaves you in place. Stepping onto the "
        f"cliff costs -100 and sends you back to S; the episode goes on.{slip} Rewards: -1 for every "
        "other move; reaching G ends the episode. The shortest safe path runs along the row above the cliff."
    )


def render_cliff_walking(observation: Any, env: Any) -> str:
    walk = env.unwrapped
    nrow, ncol = (int(n) for n in walk.shape)
    cells = [["C" if walk._cliff[r, c] else "o" for c in range(ncol)] for r in range(nrow)]
    cells[nrow - 1][0], cells[nrow - 1][ncol - 1] = "S", "G"
    row, col = divmod(int(observation), ncol)
    cells[row][col] = "@"
    grid = "\n".join(" ".join(r) for r in cells)
    return f"{grid}\nYou are at row {row + 1}, column {col + 1}. (Observation: {int(observation)})"


# ---- Blackjack ------------------------------------------------------------------------------


def blackjack_rules(env: Any) -> str:
    game = env.unwrapped
    natural = " A natural blackjack (an ace and a ten on the deal) wins 1.5." if getattr(game, "natural", False) else ""
    return (
        "Blackjack against a dealer: get a hand sum closer to 21 than the dealer's without going over. "
        "Hit draws a card; stick ends your turn and the dealer draws to 17 or more. Face cards count 10, "
        f"an ace 1 or 11. Rewards: +1 for a win, -1 for a loss, 0 for a draw.{natural}"
    )


def render_blackjack(observation: Any, env: Any) -> str:
    player, dealer, ace = (int(v) for v in observation)
    card = "an ace" if dealer == 1 else str(dealer)
    usable = " (with an ace counted as 11)" if ace else ""
    return f"Your hand sums to {player}{usable}. The dealer shows {card}. (Observation: {[player, dealer, ace]})"


Renderer = Callable[[Any, Any], str]
RULES: dict[str, Callable[[Any], str]] = {
    "FrozenLakeEnv": frozen_lake_rules,
    "TaxiEnv": taxi_rules,
    "BlackjackEnv": blackjack_rules,
    "CliffWalkingEnv": cliff_walking_rules,
}
"""The rules of a known env, by the class name of the unwrapped env."""
RENDERERS: dict[str, Renderer] = {
    "FrozenLakeEnv": render_frozen_lake,
    "TaxiEnv": render_taxi,
    "BlackjackEnv": render_blackjack,
    "CliffWalkingEnv": render_cliff_walking,
}
"""Observation renderers of known envs, by the class name of the unwrapped env."""
