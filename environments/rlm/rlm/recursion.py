"""Sub-calls deeper than one level: `llm_query(prompt)` at depth d < max_depth is itself an RLM
episode. The sub-model gets a fresh sandboxed REPL whose `context` is the prompt, the same
system prompt as the top level, and the request to answer what `context` asks; its code cells may
call `llm_query` one level deeper (the plain model call at max_depth). The episode ends with the
sub-model's FINAL(answer), which is what the caller's `llm_query` returns, or is refused after
`max_turns` turns without one. Its transcript (each message cut to `TRANSCRIPT_CHARS`) goes into
the sub-call's record; its usage counts toward the caller's budgets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rlm.repl import CODE, Repl, SubCallRefused
from rlvr.clients.base import ChatClient
from rlvr.types import SamplingArgs, Usage

NESTED_REQUEST = (
    "`context` holds {chars:,} characters: a request from the program one level up, which reads "
    "only your FINAL(answer). Look into it with code (and llm_query where a piece is too long), "
    "then answer it.\n\nQuestion: do what `context` asks."
)


async def nested_episode(
    prompt: str,
    *,
    client: ChatClient,
    system: str,
    sampling: SamplingArgs,
    repl: Repl,
    ask: Callable[[str], Awaitable[str]],
    final_answer: Callable[[str], str | None],
    max_turns: int,
    usage: Usage,
    keep: Callable[[str], str],
) -> tuple[str, list[dict[str, Any]]]:
    """Play one nested episode; (its FINAL answer, its transcript). `ask` is `llm_query` one
    level deeper; `usage` collects every reply's tokens; `repl` is closed at the end."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": NESTED_REQUEST.format(chars=len(prompt))},
    ]
    try:
        for _ in range(max_turns):
            reply = await client.chat(messages, sampling)
            usage.add(reply.usage)
            messages.append({"role": "assistant", "content": reply.text})
            answer = final_answer(reply.text)
            if answer is not None:
                return answer, [{**m, "content": keep(str(m["content"]))} for m in messages]
            blocks = CODE.findall(reply.text)
            outputs = []
            for i, code in enumerate(blocks, 1):
                cell = await repl.run(code, ask)
                outputs.append(f"[cell {i} output]\n{cell.output or '(no output)'}")
                if cell.error:
                    outputs.append(f"[cell {i} error]\n{cell.error}")
            note = "\n".join(outputs) if blocks else "No ```python code block and no FINAL(answer)."
            messages.append({"role": "user", "content": note})
    finally:
        await repl.close()
    raise SubCallRefused(f"llm_query: the nested episode gave no FINAL(answer) in {max_turns} turns")
