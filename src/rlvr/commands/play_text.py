"""`rlvr play ENV` for any environment: one episode as a text conversation in the terminal.

Used for an environment without its own game screen (`play_human`; tic-tac-toe has one), or
for any environment with `--text`. The episode is an ordinary rollout (`env.rollout`), scored
by the env's rubric; the rewards are printed at the end, function by function.

- Without `-m`, the person plays the model's side: they see what the model would see (the
  system prompt, the task, the environment's replies and tool results) and type each assistant
  turn. A tool environment shows its tool schemas first; a call is typed as the model writes
  it, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, or as that JSON object alone.
- With `-m MODEL`, the model plays and the person watches it turn by turn (Enter goes on).

The person never types the environment's side: in rlvr that side is code (`env_response`,
the tools) and the task's prompt and answer, which the rewards check. A typed user turn would
be a rollout the rubric cannot score, so watching is what `-m` offers instead.

A reply ends with a line holding only `.` (or Ctrl-D); `/show` prints the conversation so far
and `/quit` (or Ctrl-C, or Ctrl-D on an empty reply) quits. A person has no deadline: the
env's `timeout_s` is lifted while they play.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.clients.tool_calls import parse_tool_calls
from rlvr.commands.terminal import Terminal, close_loop, play_again
from rlvr.engine import score_group
from rlvr.errors import UsageError
from rlvr.types import Completion, Message, Messages, Rollout, SamplingArgs, Task

COMMANDS = ("/quit", "/show")
REPLY_PROMPT = "Your reply as the assistant (end with a line holding only '.'; /show, /quit):"


class Transcript:
    """The conversation on screen: each message printed once; `show_all` prints it again."""

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal
        self.messages: Messages = []
        self.shown = 0

    def update(self, messages: Messages, *, echo: bool = True) -> None:
        """Print the messages not yet on screen (`echo=False`: count them as seen)."""
        self.messages = list(messages)
        for message in self.messages[self.shown :] if echo else ():
            self.terminal.say(*panel(message))
        self.shown = len(self.messages)

    def show_all(self) -> None:
        self.terminal.say("the conversation so far", f"{len(self.messages)} messages")
        for message in self.messages:
            self.terminal.say(*panel(message))


def panel(message: Message) -> tuple[str, str]:
    """A message as (title, body): its role, then its text and tool calls.

    >>> panel({"role": "tool", "tool_call_id": "call_0", "content": "42"})
    ('tool (call_0)', '42')
    """
    content = message.get("content") or ""
    if not isinstance(content, str):  # content parts: keep the text ones
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    lines = [content] if content else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        lines.append(f"tool call {call.get('id', '')}: {fn.get('name')}({fn.get('arguments')})")
    title = message["role"] + (f" ({message['tool_call_id']})" if message.get("tool_call_id") else "")
    return title, "\n".join(lines)


def tools_help(tools: list[dict[str, Any]]) -> str:
    """The tool schemas, and how to type a call."""
    lines = []
    for schema in tools:
        fn = schema.get("function", schema)
        params = fn.get("parameters", {}).get("properties", {})
        args = ", ".join(f"{name}: {p.get('type', 'any')}" for name, p in params.items())
        lines.append(f"{fn['name']}({args})  {fn.get('description', '')}".rstrip())
    first = tools[0].get("function", tools[0])
    example = {
        "name": first["name"],
        "arguments": dict.fromkeys(first.get("parameters", {}).get("properties", {}), "..."),
    }
    lines += [
        "",
        "Call a tool with a reply holding",
        f"  <tool_call>{json.dumps(example)}</tool_call>",
        "(or that JSON object alone). A reply without a tool call is your answer.",
        "Full schemas: " + json.dumps(tools),
    ]
    return "\n".join(lines)


def parse_reply(text: str, id_prefix: str) -> Completion:
    """A typed turn as the model's completion: tool-call blocks split off as the chat format does.

    >>> parse_reply('{"name": "add", "arguments": {"a": 1}}', "call_0").tool_calls[0].arguments
    '{"a": 1}'
    >>> parse_reply("<answer>4</answer>", "call_0").text
    '<answer>4</answer>'
    """
    stripped = text.strip()
    if stripped.startswith("{"):  # a bare JSON call: wrap it as the chat format writes it
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            text = f"<tool_call>{stripped}</tool_call>"
    content, calls = parse_tool_calls(text, id_prefix)
    return Completion(text=content, tool_calls=calls, finish_reason="tool_calls" if calls else "stop")


class Person:
    """The person as the model: a `ChatClient` that shows the conversation and reads each turn."""

    name = "you"

    def __init__(self, terminal: Terminal) -> None:
        self.terminal = terminal
        self.view = Transcript(terminal)
        self.tools_shown = False

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        self.view.update(messages)
        if tools and not self.tools_shown:
            self.terminal.say("tools", tools_help(tools))
            self.tools_shown = True
        while (text := self.terminal.read_block(REPLY_PROMPT, COMMANDS)) == "/show":
            self.view.show_all()
        if text is None or text == "/quit":
            raise KeyboardInterrupt
        completion = parse_reply(text, f"call_{sum(m['role'] == 'assistant' for m in messages)}")
        self.view.update([*messages, completion.message()], echo=False)  # they typed it: no echo
        return completion

    async def aclose(self) -> None:
        """Nothing to release."""


class Watched:
    """A model's `ChatClient` whose turns are shown as they come, pausing after each reply."""

    def __init__(self, client: ChatClient, terminal: Terminal) -> None:
        self.client, self.terminal = client, terminal
        self.name = client.name
        self.view = Transcript(terminal)

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        self.view.update(messages)
        completion = await self.client.chat(messages, sampling, tools)
        self.view.update([*messages, completion.message()])
        while (line := self.terminal.ask("Enter for the next step (/show, /quit)", str.strip)) == "/show":
            self.view.show_all()
        if line == "/quit":
            raise KeyboardInterrupt
        return completion

    async def aclose(self) -> None:
        await self.client.aclose()


def breakdown(rollout: Rollout, weights: dict[str, float]) -> str:
    """The reward, how the episode ended, and each reward function's value and weight.

    >>> r = Rollout(task_id="t", rollout_index=0, seed=0, prompt=[], rewards={"right": 1.0, "fmt": 0.5}, reward=1.0,
    ...             stop_reason="answered")
    >>> print(breakdown(r, {"right": 1.0, "fmt": 0.0}))
    reward 1.000 (answered, terminated)
      right  1.000  x 1
      fmt    0.500  x 0 (a metric, not in the total)
    """
    ending = "truncated" if rollout.truncated else "terminated"
    lines = [f"reward {rollout.reward:.3f} ({rollout.stop_reason}, {ending})"]
    width = max(map(len, weights), default=0)
    for name, value in rollout.rewards.items():
        weight = weights.get(name, 0.0)
        note = " (a metric, not in the total)" if weight == 0 else ""
        lines.append(f"  {name:<{width}}  {value:.3f}  x {weight:g}{note}")
    if rollout.error:
        lines.append(f"error: {rollout.error.splitlines()[0]}")
    return "\n".join(lines)


async def play_episode(env: Any, player: Person | Watched, task: Task, seed: int, sampling: SamplingArgs) -> Rollout:
    """One rollout of `task` with `player` in the model's seat, scored and shown."""
    state = await env.rollout(player, task, sampling, seed)
    [rollout] = await score_group(env, task, [0], [state])
    player.view.update(state.messages)  # an env reply after the last turn (e.g. "game over")
    rubric = env.member(task)[0].rubric
    player.terminal.say("result", breakdown(rollout, dict(zip(rubric.names, rubric.weights))))
    return rollout


def pick_task(tasks: list[Task], task_id: str | None, rng: random.Random) -> Task:
    if task_id is None:
        return rng.choice(tasks)
    for task in tasks:
        if task.id == task_id:
            return task
    some = ", ".join(t.id for t in tasks[:5])
    raise UsageError(f"no eval task with id {task_id!r} (e.g. {some}); leave --task out for a random one")


def run(args: argparse.Namespace, env: Any, client: ChatClient | None, sampling: SamplingArgs) -> int:
    """Play episodes until the person stops; `client=None`: the person plays the model's side."""
    from rlvr.commands.sampling import temperature_line

    tasks = env.tasks("eval")
    if not tasks:
        raise UsageError(f"environment {args.env!r} has no tasks to play")
    rng = random.Random(args.seed)
    terminal = Terminal()
    if client is None:
        how = (
            "You play the model's side: type each assistant reply and end it with a line holding only '.' "
            "(or Ctrl-D). /show prints the conversation so far, /quit quits."
        )
    else:
        how = f"{client.name} plays, {temperature_line(args, sampling)}; you watch each step."
    rewards: list[float] = []
    loop = asyncio.new_event_loop()  # no asyncio.run: see `rlvr.commands.play.run`
    try:
        while True:
            task = pick_task(tasks, args.task, rng)
            if client is None:  # a person's typing is not a model's latency (a mixture: its member's too)
                env.timeout_s = env.member(task)[0].timeout_s = None
            terminal.say(f"{args.env}, task {task.id}", how)
            player = Person(terminal) if client is None else Watched(client, terminal)
            rollout = loop.run_until_complete(play_episode(env, player, task, rng.randrange(2**31), sampling))
            rewards.append(rollout.reward)
            terminal.console.print(f"episodes {len(rewards)}, mean reward {sum(rewards) / len(rewards):.3f}")
            if not play_again(terminal, args.games, len(rewards)):
                return 0
    except KeyboardInterrupt:
        terminal.console.print("\nbye")
        return 0
    finally:
        close_loop(loop)
