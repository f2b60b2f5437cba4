"""How much of a model's sampled replies falls in its vocabulary's tail, teacher-forced on saved
games: for each reply of `rlvr eval -o RUN` (its token ids), the probability mass the model puts,
token by token, on tokens below 1e-3, summed over the reply, split by decade.

    python experiments/sampled_rl/tail_mass.py MODEL RUN/results.jsonl [GAMES]

One forward pass a game (its last turn's prompt holds every earlier reply). A reply's tail mass
is about the chance that sampling it at T = 1 draws a token the model almost never writes.
"""

import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM

EDGES = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 0.0]


def main(model_path: str, results: str, games: int) -> None:
    rows = [json.loads(line) for line in open(results)][:games]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    mass, replies = [0.0] * (len(EDGES) - 1), 0
    with torch.no_grad():
        for row in rows:
            last = row["turns"][-1]["completion"]
            seq = last["prompt_token_ids"] + last["token_ids"]
            logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1)
            for turn in row["turns"]:
                done = turn["completion"]
                at = len(done["prompt_token_ids"]) - 1
                if seq[at + 1 : at + 1 + len(done["token_ids"])] != done["token_ids"]:
                    continue  # a turn rendered differently inside the later prompt
                p = logp[at : at + len(done["token_ids"])].exp()
                replies += 1
                for i in range(len(mass)):
                    mass[i] += float((p * ((p < EDGES[i]) & (p >= EDGES[i + 1]))).sum())
    if not replies:
        sys.exit(f"no reply of {results} could be read back from its game's last prompt")
    total = sum(mass) / replies
    per_game = sum(len(r["turns"]) for r in rows) / len(rows)
    print(f"{model_path}: {replies} replies of {len(rows)} games; tail mass a reply {total:.3e}")
    for i, m in enumerate(mass):
        print(f"  p in [{EDGES[i + 1]:g}, {EDGES[i]:g}): {m / replies:.2e}")
    print(
        f"  a game of {per_game:.1f} replies draws a tail token with probability ~{1 - math.exp(-per_game * total):.2%}"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 200)
