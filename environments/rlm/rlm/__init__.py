"""RLM: a recursive language model environment. The model does not read the long input: it
lives in the variable `context` of a sandboxed Python REPL, and the model writes code to look
into it and calls `llm_query(prompt)` to ask a sub-model about the pieces it cuts out.

The task: wiki_search's questions (one to three hops) over its whole seeded encyclopedia joined
into one string (`rlm.corpus`: 1.33 M characters for `size="full"`, far beyond a small model's
window). Each ```python block of a model turn runs in the REPL (`rlm.repl`: one
`rlvr.sandbox.SandboxSession` per rollout, variables kept across turns, killed when the
rollout ends); the reply shows what each cell printed. `FINAL(answer)` (or
`<final>answer</final>`) outside code ends the episode.

Sub-calls: `llm_query(prompt)` goes to the sub-model (`sub_model`, by default the client that
plays the rollout) as one user message, within budgets per rollout: `max_sub_calls` calls and
`max_sub_tokens` tokens (prompt + completion, as the sub-model reports them); a refused call
raises `RuntimeError` in the cell with the reason. Depth: a sub-call is a plain model call
(depth 1) unless `max_depth` > 1: then a sub-call above the last level is itself an RLM
episode whose REPL holds the prompt as `context` (`rlm.recursion`), with the same budgets. Every
sub-call is kept in the rollout's `info["sub_calls"]` (prompt, reply, usage, seconds) and its
usage is added to the rollout's.

`mode="long_prompt"` is the baseline: the whole context in the prompt, no REPL.

Rewards:

    exact_match     weight 1   FINAL(answer) equals the reference (wiki_search's normalisation)
    sub_calls       weight 0   llm_query calls made (metric)
    sub_tokens      weight 0   tokens the sub-model read and wrote (metric)
    repl_cells      weight 0   code cells run (metric)
    repl_errors     weight 0   cells that raised or were killed (metric)

Reference players: `oracle` (solves every question in both modes: `rlm.players`) and `guess`.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from wiki_search.questions import normalize
from wiki_search.world import SIZES

from rlm.corpus import build_context, questions
from rlm.players import guess_policy, oracle_policy
from rlm.recursion import nested_episode
from rlm.repl import CODE, Repl, SubCallRefused
from rlvr import MultiTurnEnv, Policy, Rubric, State, Task
from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import EnvOptions, rollout_client, stop
from rlvr.errors import PromptTooLongError, UsageError
from rlvr.sandbox import SandboxLimits
from rlvr.sandbox.isolation import check, isolation
from rlvr.seeding import mix_seed
from rlvr.types import Messages, Rollout, SamplingArgs, Usage

__all__ = ["RLMEnv", "RLMState", "exact_match", "final_answer", "load_environment"]

MODES = ("rlm", "long_prompt")
TRANSCRIPT_CHARS = 2000
"""Characters of a sub-call's prompt kept in the rollout (its length is kept too)."""

RLM_PROMPT = (
    "You answer a question about a long text that you cannot read directly: it is the str variable `context` "
    "of a Python REPL. Write Python code in ```python blocks; each block runs in the REPL, which keeps its "
    "variables between turns, and you see what it prints (the first 4,000 characters). In the REPL, "
    "llm_query(prompt) asks a helper language model, which sees only that prompt, and returns its reply (a str); "
    "at most {calls} calls. In `context`, each page starts with a line '# Title' and each section with "
    "'## Heading'. When you know the answer, reply FINAL(answer): a name or a number, exactly as the text writes it."
)
LONG_PROMPT = (
    "Answer the question about the encyclopedia below. Reply FINAL(answer): a name or a number, exactly as "
    "the encyclopedia writes it."
)


def final_answer(text: str) -> str | None:
    """The answer of the last `<final>answer</final>`, else of the last line's `FINAL(answer)`
    (up to that line's last ")"), outside code blocks; or None. Found by plain string search, in
    time linear in the text: a regex over a degenerate reply ("FINAL(" or "<final>" repeated)
    took seconds of backtracking per turn.

    >>> final_answer("done: FINAL('Ostva River')"), final_answer("```python\\nFINAL(x)\\n```")
    ('Ostva River', None)
    >>> final_answer("<final>a</final> then <final>b</final>"), final_answer("FINAL(" * 3)
    ('b', None)
    """
    prose = CODE.sub("", text)
    end = prose.rfind("</final>")
    start = prose.rfind("<final>", 0, end) if end >= 0 else -1
    if start >= 0:
        return _clean(prose[start + len("<final>") : end])
    for line in reversed(prose.split("\n")):
        start, end = line.find("FINAL("), line.rfind(")")
        if 0 <= start and start + len("FINAL(") <= end:
            return _clean(line[start + len("FINAL(") : end])
    return None


def _clean(answer: str) -> str:
    return answer.strip().strip("\"'`").strip()


def exact_match(completion: Messages, answer: str | None) -> float:
    """1 when the last FINAL answer equals the reference after wiki_search's `normalize`.

    >>> exact_match([{"role": "assistant", "content": "FINAL(the Ostva River)"}], "Ostva River")
    1.0
    """
    said = [str(m.get("content") or "") for m in completion if m.get("role") == "assistant"]
    got = final_answer(said[-1]) if said else None
    return float(got is not None and answer is not None and normalize(got) == normalize(answer))


@dataclass(kw_only=True)
class RLMState(State):
    repl: Repl | None = None
    """This rollout's REPL (None in the long-prompt mode); its process starts on the first cell."""
    sub_usage: Usage = field(default_factory=Usage)
    """Tokens of the sub-calls (also counted in `usage`)."""
    cells: int = 0
    cell_errors: int = 0


def sub_calls(state: RLMState) -> float:
    """llm_query calls answered (a metric)."""
    return float(len(state.info.get("sub_calls", [])))


def sub_tokens(state: RLMState) -> float:
    """Prompt and completion tokens of the sub-calls (a metric)."""
    return float(state.sub_usage.prompt_tokens + state.sub_usage.completion_tokens)


def repl_cells(state: RLMState) -> float:
    """Code cells run (a metric)."""
    return float(state.cells)


def repl_errors(state: RLMState) -> float:
    """Cells that raised, or whose REPL was killed (a metric)."""
    return float(state.cell_errors)


class RLMEnv(MultiTurnEnv[RLMState]):
    """Questions over `context`, through a REPL (`mode="rlm"`) or in the prompt (`"long_prompt"`)."""

    def __init__(
        self,
        dataset: Sequence[Task],
        *,
        context: str,
        mode: str = "rlm",
        limits: SandboxLimits | None = None,
        cell_timeout_s: float = 30.0,
        max_sub_calls: int = 16,
        max_sub_tokens: int = 200_000,
        sub_max_tokens: int = 256,
        max_depth: int = 1,
        **options: Unpack[EnvOptions],
    ) -> None:
        super().__init__(dataset, **options)
        self.context, self.mode, self.limits = context, mode, limits or SandboxLimits()
        self.cell_timeout_s, self.max_sub_calls = cell_timeout_s, max_sub_calls
        self.max_sub_tokens, self.sub_max_tokens, self.max_depth = max_sub_tokens, sub_max_tokens, max_depth
        self.sub_client: ChatClient | None = None
        """The sub-model; None: the client playing the rollout."""

    def initial_prompt(self, task: Task) -> Messages:
        if self.mode == "long_prompt":
            system, body = LONG_PROMPT, f"{self.context}\n\nQuestion: {task.question}"
        else:
            system = RLM_PROMPT.format(calls=self.max_sub_calls)
            body = f"`context` holds {len(self.context):,} characters.\n\nQuestion: {task.question}"
        return [{"role": "system", "content": system}, {"role": "user", "content": body}]

    def setup_state(self, task: Task) -> RLMState:
        repl = Repl(self.context, self.limits, self.cell_timeout_s) if self.mode == "rlm" else None
        return RLMState(task=task, repl=repl)

    @stop
    def answered(self, state: RLMState) -> bool:
        """The model's last turn gave FINAL(answer) (terminated)."""
        return bool(state.turns) and final_answer(state.turns[-1].completion.text) is not None

    async def env_response(self, messages: Messages, state: RLMState) -> Messages:
        text = str(messages[-1].get("content") or "")
        if state.repl is None:
            return [{"role": "user", "content": "There is no REPL in this mode: reply FINAL(answer)."}]
        blocks = CODE.findall(text)
        if not blocks:
            hint = "No ```python code block and no FINAL(answer): write code to run in the REPL, or answer."
            return [{"role": "user", "content": hint}]
        parts = []
        for i, code in enumerate(blocks, 1):
            cell = await state.repl.run(code, functools.partial(self._ask, state))
            state.cells += 1
            state.cell_errors += cell.error is not None
            parts.append(f"[cell {i} output]\n{cell.output or '(no output: print() what you need)'}")
            if cell.error:
                parts.append(f"[cell {i} error]\n{cell.error}")
        return [{"role": "user", "content": "\n".join(parts)}]

    async def _ask(self, state: RLMState, prompt: str, depth: int = 1) -> str:
        """One budgeted sub-call at `depth`: a plain model call at `max_depth`, a nested RLM
        episode above it (`rlm.recursion`). Budgets are the rollout's, whatever the depth; the
        transcript and usage go into the rollout."""
        done: list[dict[str, Any]] = state.info.setdefault("sub_calls", [])
        if len(done) >= self.max_sub_calls:
            raise SubCallRefused(f"llm_query refused: all {self.max_sub_calls} calls of this episode are used")
        spent = state.sub_usage.prompt_tokens + state.sub_usage.completion_tokens
        if spent >= self.max_sub_tokens:
            raise SubCallRefused(f"llm_query refused: {spent} of {self.max_sub_tokens} sub-call tokens are used")
        client = self.sub_client or rollout_client()
        sampling = self.sampling.replace(max_tokens=self.sub_max_tokens, seed=mix_seed(state.seed, 7919, len(done)))
        t0, used = time.monotonic(), Usage()
        record: dict[str, Any] = {"depth": depth, "prompt": _kept(prompt), "prompt_chars": len(prompt)}
        try:
            if depth < self.max_depth:
                text, record["transcript"] = await nested_episode(
                    prompt,
                    client=client,
                    system=RLM_PROMPT.format(calls=self.max_sub_calls),
                    sampling=sampling,
                    repl=Repl(prompt, self.limits, self.cell_timeout_s),
                    ask=functools.partial(self._ask, state, depth=depth + 1),
                    final_answer=final_answer,
                    max_turns=self.max_turns or 12,
                    usage=used,
                    keep=_kept,
                )
            else:
                reply = await client.chat([{"role": "user", "content": prompt}], sampling)
                text = reply.text
                used.add(reply.usage)
        except PromptTooLongError as exc:
            raise SubCallRefused(f"llm_query refused: the sub-model cannot read a prompt this long ({exc})") from None
        finally:
            state.sub_usage.add(used)
            state.usage.add(used)
        record["reply"] = text
        record["usage"] = {"prompt_tokens": used.prompt_tokens, "completion_tokens": used.completion_tokens}
        record["seconds"] = round(time.monotonic() - t0, 4)
        done.append(record)
        return text

    async def close_state(self, state: RLMState) -> None:
        if state.repl is not None:
            await state.repl.close()

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return {
            "oracle": functools.partial(Policy, oracle_policy, name="oracle"),
            "guess": functools.partial(Policy, guess_policy, name="guess"),
        }

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        """Accuracy by number of hops, sub-calls per rollout."""
        scored: list[Rollout] = [r for r in rollouts if r.error is None]
        out: dict[str, float] = {}
        for hops in sorted({int(r.info.get("hops", 0)) for r in scored}):
            group = [r.rewards.get("exact_match", 0.0) for r in scored if r.info.get("hops") == hops]
            out[f"exact_match {hops} hop{'s' if hops > 1 else ''}"] = statistics.fmean(group)
        if scored:
            out["sub-calls per rollout"] = statistics.fmean(len(r.info.get("sub_calls", [])) for r in scored)
        return out


def load_environment(
    seed: int = 0,
    size: str = "full",
    mode: str = "rlm",
    num_tasks: int = 1000,
    eval_tasks: int = 100,
    min_hops: int = 1,
    max_hops: int = 3,
    max_turns: int = 12,
    sub_model: str | None = None,
    sub_base_url: str | None = None,
    max_sub_calls: int = 16,
    max_sub_tokens: int = 200_000,
    sub_max_tokens: int = 256,
    max_depth: int = 1,
    cell_timeout_s: float = 30.0,
    cpu_s: int = 120,
    memory_mb: int = 1024,
    unsafe_sandbox: bool = False,
) -> RLMEnv:
    """The RLM environment.

    Args:
        seed: world and question seed (wiki_search's); same arguments, same context and tasks.
        size: the world: `full` (1.33 M characters of context) or `small` (131 k, for tests).
        mode: `rlm` (the context in a REPL) or `long_prompt` (the whole context in the prompt).
        num_tasks: training questions.
        eval_tasks: evaluation questions (a separate seeded stream).
        min_hops: fewest pages a question needs.
        max_hops: most pages a question needs (at most 3).
        max_turns: model turns before the episode is cut.
        sub_model: the model llm_query asks (`policy:NAME`, a folder, an API model); None: the rollout's own.
        sub_base_url: OpenAI-compatible endpoint of `sub_model`.
        max_sub_calls: llm_query calls per rollout.
        max_sub_tokens: sub-call tokens (prompt + completion) per rollout; the call that crosses it is the last.
        sub_max_tokens: most tokens of one sub-call's reply.
        max_depth: sub-call levels: 1, llm_query is a plain model call; d > 1, a call above level d is
            itself an RLM episode over its prompt (`rlm.recursion`).
        cell_timeout_s: wall-clock seconds one cell may run (its sub-calls not counted).
        cpu_s: CPU seconds of one rollout's REPL process, all cells together.
        memory_mb: address-space limit of the REPL process, in MiB.
        unsafe_sandbox: run the REPL even where the kernel cannot isolate it (as you, with your files).
    """
    if size not in SIZES or mode not in MODES:
        raise UsageError(f"size must be one of {sorted(SIZES)} and mode one of {MODES}, got {size!r}, {mode!r}")
    if not 1 <= min_hops <= max_hops <= 3:
        raise UsageError(f"need 1 <= min_hops <= max_hops <= 3, got min_hops={min_hops}, max_hops={max_hops}")
    if num_tasks < 1 or eval_tasks < 1 or max_sub_calls < 0 or max_sub_tokens < 1 or sub_max_tokens < 1:
        raise UsageError("num_tasks, eval_tasks, max_sub_tokens and sub_max_tokens must be >= 1, max_sub_calls >= 0")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise UsageError(f"max_depth must be an integer >= 1 (1: llm_query is a plain model call), got {max_depth!r}")
    limits = SandboxLimits(timeout_s=cell_timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, unsafe=unsafe_sandbox)
    if mode == "rlm":
        check(limits, isolation())  # a machine that cannot isolate the REPL fails now, not in a rollout
    rubric = Rubric([exact_match, sub_calls, sub_tokens, repl_cells, repl_errors], [1.0, 0.0, 0.0, 0.0, 0.0])
    env = RLMEnv(
        questions(seed, size, "train", num_tasks, min_hops, max_hops),
        eval_dataset=questions(seed, size, "eval", eval_tasks, min_hops, max_hops),
        context=build_context(seed, size),
        mode=mode,
        limits=limits,
        cell_timeout_s=cell_timeout_s,
        max_sub_calls=max_sub_calls,
        max_sub_tokens=max_sub_tokens,
        sub_max_tokens=sub_max_tokens,
        max_depth=max_depth,
        rubric=rubric,
        sampling=SamplingArgs(max_tokens=1024),
        max_turns=max_turns,
    )
    if sub_model is not None:
        from rlvr.clients.resolve import make_client

        env.sub_client = make_client(sub_model, env, base_url=sub_base_url)
    return env


def _kept(text: str) -> str:
    """`text` cut to TRANSCRIPT_CHARS for the rollout's record, saying how much was left out."""
    if len(text) <= TRANSCRIPT_CHARS:
        return text
    return text[:TRANSCRIPT_CHARS] + f"[... {len(text) - TRANSCRIPT_CHARS} more]"
