"""SFT smoke on real teacher games: a freshly initialised tiny model learns the move format.

Data: the first turn of 400 tic-tac-toe games played by `policy:teacher` (system prompt, board,
teacher reply), one sample each. 70 SFT steps of 16 at lr 3e-3 on one CPU thread. Then 32
first-turn replies on held-out boards are sampled at temperature 1.0. Threshold: at least 75%
are exactly `<think>...</think><move>N</move>`. Measured on the 2-core machine (2026-11-27,
another process on the other core): 70 steps 96.9% well-formed in 109 s of SFT; 60 steps 93.8%;
120 steps (this test's length until then) 100% in 195 s; 50 steps at lr 5e-3 68.8%. The code of
an earlier session measured 41% at 60 steps and 90.6% at 120, so the margin is not large.
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


@pytest.mark.heavy
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
        max_steps=70,
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
