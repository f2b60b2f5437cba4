"""Token-level entropy minimisation alone (no reward) on a model's own saved games: does the
vocabulary tail that sampled play falls into shrink, and what does it cost the greedy play?

    python experiments/sampled_rl/entropy_only.py MODEL RUN/results.jsonl LR STEPS OUT

Each step: 16 of the first 800 games, the entropy of the full next-token distribution (with
its gradient) summed over their reply tokens, AdamW at LR. Every 10 steps, the tail mass
a reply (probability on tokens below 1e-3) on games 800-900. The model is saved to OUT (copy the
tokenizer files beside it to evaluate it with `rlvr eval --exhaustive`).
"""

import json
import random
import sys

import torch
from transformers import AutoModelForCausalLM


def sequence(row: dict) -> tuple[list[int], torch.Tensor]:
    last = row["turns"][-1]["completion"]
    seq = last["prompt_token_ids"] + last["token_ids"]
    mask = torch.zeros(len(seq), dtype=torch.bool)
    for turn in row["turns"]:
        at = len(turn["completion"]["prompt_token_ids"]) - 1
        mask[at : at + len(turn["completion"]["token_ids"])] = True
    return seq, mask


def tail(model, rows: list[dict]) -> float:
    model.eval()
    total = replies = 0.0
    with torch.no_grad():
        for row in rows:
            seq, mask = sequence(row)
            p = torch.softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1)[mask]
            total += float((p * (p < 1e-3)).sum())
            replies += len(row["turns"])
    model.train()
    return total / replies


def main(model_path: str, results: str, lr: float, steps: int, out: str) -> None:
    torch.manual_seed(0)
    random.seed(0)
    rows = [json.loads(line) for line in open(results)]
    if len(rows) < 900:
        sys.exit(f"{results} holds {len(rows)} games; this needs 900 (800 to train on, 100 to measure)")
    train, held = rows[:800], rows[800:900]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    print(f"step 0: tail mass a reply {tail(model, held):.3e}", flush=True)
    for step in range(1, steps + 1):
        opt.zero_grad()
        for row in random.sample(train, 16):
            seq, mask = sequence(row)
            logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1)[mask]
            entropy = -(logp.exp() * logp).sum(-1)
            (entropy.sum() / (16 * 30)).backward()  # summed over a game's reply tokens (~30 a reply)
        opt.step()
        if step % 10 == 0:
            print(f"step {step}: tail mass a reply {tail(model, held):.3e}", flush=True)
    model.save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
