"""SFT smoke on real teacher games: a freshly initialised tiny model learns the move format.

Data: the first turn of 400 tic-tac-toe games played by `policy:teacher` (system prompt, board,
teacher reply), one sample each. 120 SFT steps of 16 on one CPU thread (78-82 s on an idle
2-core machine; 60 steps of 16 fall to 41% well-formed replies, 80 of 12 to 69%). Then 32
first-turn replies on held-out boards are sampled at temperature 1.0. Threshold: at least 75%
are exactly `<think>...</think><move>N</move>` (measured: 90.6%; 96.9% at temperature 0.7 and
100% greedy on this machine).
"""

from __future__ import annotations

import asyncio
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("rlvr_tictactoe")

from rlvr_tictactoe.rewards import PARSER

from rlvr.clients.local import LocalModel
from rlvr.engine import run_rollouts
from rlvr.models import build_tiny_model, default_corpus
from rlvr.registry import load_environment
from rlvr.train.sft import train_sft
from rlvr.train.sft_config import SFTConfig
from rlvr.types import SamplingArgs

# its own limit, 600 s: the suite's 300 s is within 4x of its idle time, and with 5 to 10 other
# processes on the 2 cores it once ran past 300 s
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread"), pytest.mark.timeout(600)]


def test_teacher_games_teach_a_fresh_model_the_move_format(tmp_path) -> None:
    env = load_environment("tictactoe", num_tasks=400, seed=3)
    games = asyncio.run(run_rollouts(env, env.policies()["teacher"](), env.tasks("train")))
    rows = [{"messages": g.messages[:3]} for g in games]  # system, board, the teacher's first move
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)
    data = tmp_path / "teacher.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    corpus = default_corpus() + [m["content"] for r in rows for m in r["messages"]]
    model_dir = build_tiny_model(tmp_path / "base", preset="tiny", corpus=corpus, seed=0)
    cfg = SFTConfig(
        model=str(model_dir),
        data=str(data),
        output_dir=str(tmp_path / "sft"),
        max_steps=120,
        batch_size=16,
        micro_batch_size=16,
        lr=3e-3,
        warmup_steps=3,
        eval_fraction=0.0,
        save_every=None,
        device="cpu",
        seed=0,
    )
    result = train_sft(cfg, quiet=True)
    first, last = sum(result.train_loss[:5]) / 5, sum(result.train_loss[-5:]) / 5
    assert last < 0.15 * first, (first, last)  # measured: 6.0 -> about 0.2

    lm = LocalModel(str(result.final_dir), device="cpu", max_batch_size=32)
    tasks = env.tasks("eval")[:32]

    async def replies() -> list[str]:
        sampling = [SamplingArgs(max_tokens=80, temperature=1.0, seed=i) for i in range(len(tasks))]
        outs = await asyncio.gather(*(lm.chat(env.initial_prompt(t), s) for t, s in zip(tasks, sampling)))
        return [o.text for o in outs]

    texts = asyncio.run(replies())
    formatted = sum(PARSER.is_formatted(t) for t in texts) / len(texts)
    print(f"well-formed think+move replies at temperature 1.0: {formatted:.1%} (threshold 75%)")
    assert formatted >= 0.75, texts[:4]
