"""Number problems generated from a seed, each with an exact integer answer and a short
program that computes it (what the `oracle` player writes)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    text: str
    """Question with `{a}`, `{b}`, ... placeholders."""
    draw: Callable[[random.Random], dict[str, int]]
    program: str
    """Python that prints the answer, with the same placeholders."""


def _fib(n: int, m: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    return a


def _collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))
    return sum(sieve)


KINDS = (
    Kind(
        "modpow",
        "What is {a}^{b} mod {m}?",
        lambda r: {"a": r.randint(2, 999), "b": r.randint(1000, 10**6), "m": r.randint(10**3, 10**9)},
        "print(pow({a}, {b}, {m}))",
    ),
    Kind(
        "digit_sum",
        "What is the sum of the digits of {a}^{b}?",
        lambda r: {"a": r.randint(2, 99), "b": r.randint(50, 500)},
        "print(sum(int(d) for d in str({a} ** {b})))",
    ),
    Kind(
        "count_primes",
        "How many prime numbers are less than {n}?",
        lambda r: {"n": r.randint(1000, 200_000)},
        "n = {n}\nsieve = [True] * n\nsieve[0] = sieve[1] = False\nfor i in range(2, int(n ** 0.5) + 1):\n"
        "    if sieve[i]:\n        sieve[i * i::i] = [False] * len(range(i * i, n, i))\nprint(sum(sieve))",
    ),
    Kind(
        "fibonacci",
        "What is the {n}th Fibonacci number modulo {m}, where F(1) = F(2) = 1?",
        lambda r: {"n": r.randint(100, 100_000), "m": r.randint(1000, 10**9)},
        "a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, (a + b) % {m}\nprint(a)",
    ),
    Kind(
        "divisor_sum",
        "What is the sum of all positive divisors of {n}?",
        lambda r: {"n": r.randint(10_000, 10**7)},
        "n = {n}\ntotal = 0\ni = 1\nwhile i * i <= n:\n    if n % i == 0:\n"
        "        total += i + (n // i if i * i != n else 0)\n    i += 1\nprint(total)",
    ),
    Kind(
        "collatz",
        "How many steps does the Collatz sequence starting at {n} take to reach 1?",
        lambda r: {"n": r.randint(10, 10**6)},
        "n, steps = {n}, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)",
    ),
    Kind(
        "product",
        "What is {a} * {b}?",
        lambda r: {"a": r.randint(10**6, 10**9), "b": r.randint(10**6, 10**9)},
        "print({a} * {b})",
    ),
)


def answer(kind: str, v: dict[str, int]) -> int:
    """The exact answer, computed here (independently of the oracle's program).

    >>> answer("modpow", {"a": 3, "b": 4, "m": 5}), answer("collatz", {"n": 6}), answer("count_primes", {"n": 10})
    (1, 8, 4)
    """
    solve: dict[str, Callable[[], int]] = {
        "modpow": lambda: pow(v["a"], v["b"], v["m"]),
        "digit_sum": lambda: sum(map(int, str(v["a"] ** v["b"]))),
        "count_primes": lambda: _primes_below(v["n"]),
        "fibonacci": lambda: _fib(v["n"], v["m"]),
        "divisor_sum": lambda: sum(
            d + (v["n"] // d if d * d != v["n"] else 0) for d in range(1, int(v["n"] ** 0.5) + 1) if v["n"] % d == 0
        ),
        "collatz": lambda: _collatz(v["n"]),
        "product": lambda: v["a"] * v["b"],
    }
    return solve[kind]()


def make_problem(rng: random.Random) -> tuple[str, int, str]:
    """(question, answer, kind name)."""
    kind = rng.choice(KINDS)
    values = kind.draw(rng)
    return kind.text.format(**values), answer(kind.name, values), kind.name


def read_problem(question: str) -> tuple[Kind, dict[str, int]] | None:
    """The kind and numbers of a question text (what a player can read from it).

    >>> kind, values = read_problem("What is 3^4 mod 5?")
    >>> kind.name, values
    ('modpow', {'a': 3, 'b': 4, 'm': 5})
    """
    for kind in KINDS:
        pattern = re.escape(kind.text)
        for field in re.findall(r"\{(\w+)\}", kind.text):
            pattern = pattern.replace(re.escape("{" + field + "}"), f"(?P<{field}>\\d+)", 1)
        found = re.fullmatch(pattern, question.strip())
        if found:
            return kind, {k: int(v) for k, v in found.groupdict().items()}
    return None
