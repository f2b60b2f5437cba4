#!/usr/bin/env bash
# Several run.sh variants at once on one GPU (a 17.6M model leaves most of it idle), then the
# best of their kept models by the 1,000-game T = 1 evaluations (fewest lost games against the
# optimal and the random opponent together, then fewest games with a rejected move), packed as
# bfloat16 shards under 14 MB.
#
#   VARIANTS="t1-lr2:1:2e-5 t125-lr2:1.25:2e-5" experiments/sampled_rl/variants.sh MODEL RUNS STEPS PACK
#
# Each variant is NAME:TRAIN_TEMP:LR[:SHARPEN]; TRAIN_SECONDS, EVAL_TASKS, EVAL_EVERY and SEED pass through.
# Each run holds 25-27 GB of an H100 (generation buffers and the allocator's cache), so two fit
# on an 80 GB card and a third runs out of memory.
set -euo pipefail
MODEL=$1 RUNS=$2 STEPS=$3 PACK=$4
here=$(dirname "$0")
mkdir -p "$RUNS"
for v in ${VARIANTS:?name:temp:lr ...}; do
  IFS=: read -r name temp lr sharpen <<< "$v"
  TRAIN_TEMP=$temp LR=$lr SHARPEN=${sharpen:-0} "$here/run.sh" "$MODEL" "$RUNS/$name" "$STEPS" > "$RUNS/$name.log" 2>&1 &
done
wait
python3 - "$RUNS" "$PACK" << 'PY'
import json, sys
from pathlib import Path
runs, pack = Path(sys.argv[1]), Path(sys.argv[2])
found = []
for s in sorted(runs.glob("*/summary.json")):
    d = json.loads(s.read_text())
    opt, rnd = d.get("best-optimal"), d.get("best-random")
    print(json.dumps(d))
    if opt and rnd and opt["games"] >= 1000 and rnd["games"] >= 1000:
        found.append((opt["wdl"][2] + rnd["wdl"][2], opt["rejected_move_games"] + rnd["rejected_move_games"], s.parent))
if not found:
    sys.exit("no variant kept a model with both evaluations")
found.sort(key=lambda x: (x[0], x[1]))
best = found[0][2]
print("picked", best.name, "lost", found[0][0], "rejected-move games", found[0][1])
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(best / "rl" / "best", dtype=torch.bfloat16)
model.save_pretrained(pack, max_shard_size="14MB")
(pack / "picked.json").write_text(json.dumps({"variant": best.name, **json.loads((best / "summary.json").read_text())}))
PY
