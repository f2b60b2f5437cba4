"""The REPL server: the program `rlm.repl.Repl` runs in a `SandboxSession` (standard library only).

It speaks JSON lines over stdin/stdout with the environment:

    env -> repl   {"op": "init", "context": "..."}       once: `context` becomes a variable
    env -> repl   {"op": "exec", "code": "..."}         run a cell in the same globals
    repl -> env   {"op": "query", "prompt": "..."}      `llm_query(prompt)` inside a cell
    env -> repl   {"op": "answer", "text": "..."}       or {"op": "answer", "error": "..."}
    repl -> env   {"op": "done", "stdout": "...", "error": "..." | null}

A cell's stdout and stderr go to a buffer (its print() output), cut to `OUTPUT_LIMIT`
characters; an exception comes back as its last traceback lines. `llm_query` raises
`RuntimeError` with the environment's message when a budget is spent.
"""

import contextlib
import io
import json
import os
import sys
import traceback

OUTPUT_LIMIT = 4000

_channel = sys.stdout
"""Where messages to the environment go (stdout's own descriptor once `main` has started)."""


def _send(message):
    _channel.write(json.dumps(message) + "\n")
    _channel.flush()


def _receive():
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)
    return json.loads(line)


def llm_query(prompt):
    """Ask the sub-model `prompt` (a string); returns its reply text."""
    _send({"op": "query", "prompt": str(prompt)})
    reply = _receive()
    if reply.get("error"):
        raise RuntimeError(reply["error"])
    return reply["text"]


def _cut(text):
    if len(text) <= OUTPUT_LIMIT:
        return text
    return text[:OUTPUT_LIMIT] + f"\n[... {len(text) - OUTPUT_LIMIT} more characters of output dropped]"


def _run(code, namespace):
    buffer = io.StringIO()
    error = None
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            exec(compile(code, "<cell>", "exec"), namespace)
        except BaseException as exc:  # the cell's failure (exit() too) is the model's to read
            lines = traceback.format_exception(exc)
            error = "".join(lines[-4:]) if len(lines) > 4 else "".join(lines)
    return {"op": "done", "stdout": _cut(buffer.getvalue()), "error": _cut(error) if error else None}


def main():
    global _channel
    _channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    # a stray os.write(1, ...) goes to a file of the working directory, not into the channel
    os.dup2(os.open("fd1-output", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    namespace = {"__name__": "__repl__", "llm_query": llm_query}
    while True:
        message = _receive()
        if message.get("op") == "init":
            namespace["context"] = message["context"]
            _send({"op": "ready"})
        elif message.get("op") == "exec":
            _send(_run(message["code"], namespace))


if __name__ == "__main__":  # the sandbox's runner runs it as __main__; importing it does nothing
    main()
