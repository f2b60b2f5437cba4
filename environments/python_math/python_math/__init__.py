"""Python math: number problems the model may solve by running Python in a sandbox.

Problems (modular powers, digit sums, prime counts, Fibonacci numbers modulo m, divisor sums,
Collatz steps, big products) are generated from a seed and have exact integer answers. The
model has one tool, `run_python(code)`, which runs a program in `rlvr.sandbox` (kernel-isolated:
an unprivileged user, no host files, its own processes, no network, time/memory/process/disk
limits) and returns what it prints; anything that goes wrong comes back as an `Error: ...` tool
message. Where the kernel cannot isolate code, loading the environment fails with one line,
unless `unsafe_sandbox=True`.
The episode ends when the model answers without a tool call, inside `<answer>` tags.

Rewards:

    correct_answer       weight 1   the final <answer> is the right integer
    run_python_calls     weight 0   calls to the tool (metric)
    failed_tool_calls    weight 0   calls that failed: errors, limits, denied operations (metric)

Reference players: `oracle` writes a program for the problem, runs it and answers with its
output (reward 1); `guess` answers at once with a number of about the right size (reward ~0).
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable

from python_math.problems import make_problem, read_problem
from rlvr import Policy, Rubric, Task, ToolEnv, ToolState, XMLParser
from rlvr.clients.base import ChatClient
from rlvr.deprecation import renamed_arguments
from rlvr.errors import UsageError
from rlvr.sandbox import SandboxLimits, python_tool
from rlvr.types import Completion, Messages, ToolCall

__all__ = ["PythonMathEnv", "correct_answer", "load_environment"]

MIN_MEMORY_MB, MAX_MEMORY_MB = 32, 2**20
"""`memory_mb`'s range: Python needs about 16 MiB of address space to start in the sandbox (12
failed every call), and RLIMIT_AS above 1 TiB is no limit."""
SYSTEM_PROMPT = (
    "Solve the problem. You may call run_python(code) to run a Python program and see what it prints "
    "(no network, limited time and memory). When you are done, reply with only the final integer "
    "inside <answer>...</answer>."
)


class PythonMathEnv(ToolEnv[ToolState]):
    """A `ToolEnv` whose one tool is the sandboxed `run_python`."""

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return {
            "oracle": functools.partial(Policy, oracle_policy, name="oracle"),
            "guess": functools.partial(Policy, guess_policy, name="guess"),
        }


def _as_int(text: str | None) -> int | None:
    cleaned = (text or "").strip().replace(",", "")
    return int(cleaned) if re.fullmatch(r"-?\d+", cleaned) else None


def correct_answer(completion: Messages, answer: str | None, parser: XMLParser) -> float:
    """1 when the final <answer> is the reference integer (thousands commas allowed).

    >>> p = XMLParser(["think", "answer"], optional=["think"])
    >>> correct_answer([{"role": "assistant", "content": "<answer>1,024</answer>"}], "1024", p)
    1.0
    """
    got = _as_int(parser.parse_answer(completion))
    return float(got is not None and got == _as_int(answer))


def run_python_calls(state: ToolState) -> float:
    """Calls to run_python (a metric)."""
    return float(state.tool_calls.get("run_python", 0))


def failed_tool_calls(state: ToolState) -> float:
    """Tool calls that failed (a metric)."""
    return float(state.failed_tool_calls)


def _question(messages: Messages) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def oracle_policy(messages: Messages, rng: random.Random) -> Completion:
    """Writes a program for the problem, runs it through the tool, answers with its output."""
    results = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    if results:
        return Completion(text=f"<answer>{results[-1].strip()}</answer>")
    problem = read_problem(_question(messages))
    if problem is None:
        return Completion(text="<answer>0</answer>")
    kind, values = problem
    call = ToolCall(id="call_0", name="run_python", arguments=json.dumps({"code": kind.program.format(**values)}))
    return Completion(text="", tool_calls=[call], finish_reason="tool_calls")


def guess_policy(messages: Messages, rng: random.Random) -> str:
    """No tools: a number with as many digits as the largest number in the question."""
    digits = max((len(n) for n in re.findall(r"\d+", _question(messages))), default=2)
    return f"<answer>{rng.randint(10 ** (digits - 1), 10**digits - 1)}</answer>"


def make_tasks(split: str, count: int, seed: int) -> list[Task]:
    """`count` problems of one split; problem i depends only on (seed, split, i)."""
    tasks = []
    for i in range(count):
        rng = random.Random(f"python_math:{seed}:{split}:{i}")
        question, answer, kind = make_problem(rng)
        tasks.append(
            Task(
                id=f"{split}-{i}", question=question, answer=str(answer), info={"kind": kind}, seed=rng.getrandbits(31)
            )
        )
    return tasks


@renamed_arguments(num_examples="num_tasks", num_eval_examples="eval_tasks")
def load_environment(
    seed: int = 0,
    num_tasks: int = 1000,
    eval_tasks: int = 100,
    max_turns: int = 8,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    unsafe_sandbox: bool = False,
) -> PythonMathEnv:
    """The python-math environment.

    Args:
        seed: dataset seed; same arguments, same problems.
        num_tasks: training problems.
        eval_tasks: evaluation problems (a separate seeded stream).
        max_turns: model turns before the episode is cut.
        timeout_s: wall-clock seconds per program run.
        memory_mb: address-space limit per program run, in MiB.
        unsafe_sandbox: run the programs even where the kernel cannot isolate them (as you, with
            your files, only rlimits and audit hooks); by default such a machine is refused.
    """
    if num_tasks < 1 or eval_tasks < 1:
        raise UsageError(f"num_tasks and eval_tasks must be >= 1, got {num_tasks}, {eval_tasks}")
    if not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:  # (1 failed every call: Python cannot start in 1 MiB)
        raise UsageError(f"memory_mb must be between {MIN_MEMORY_MB} and {MAX_MEMORY_MB} (MiB), got {memory_mb}")
    limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb, unsafe=unsafe_sandbox)
    parser = XMLParser(["think", "answer"], optional=["think"])
    return PythonMathEnv(
        make_tasks("train", num_tasks, seed),
        eval_dataset=make_tasks("eval", eval_tasks, seed),
        tools=[python_tool(limits)],
        system_prompt=SYSTEM_PROMPT,
        parser=parser,
        rubric=Rubric([correct_answer, run_python_calls, failed_tool_calls], weights=[1.0, 0.0, 0.0], parser=parser),
        max_turns=max_turns,
    )
