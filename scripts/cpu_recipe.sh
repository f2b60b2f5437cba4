#!/usr/bin/env bash
# The CPU recipe of docs/training.md ("Train on a CPU"): scaffold the multi-turn guess-the-number
# env, build a tiny model, evaluate it, SFT it on its binary-search player's games, evaluate,
# RL it, evaluate. One line per stage with its wall time and the greedy solved rate, then RL against
# SFT task by task (the mean difference and a 95% bootstrap interval).
# TEACHER=middle_half SFTs on the scaffold's weaker player instead (a random number from the
# middle half of what the hints leave; docs/training.md says what RL did from it).
#
#   scripts/cpu_recipe.sh [OUT_DIR]      # OUT_DIR defaults to a fresh temporary folder
#
# Run it from the checkout's venv (`make install-dev`, then `. .venv/bin/activate`). The env is
# installed into that venv for the run (pip install -e) and uninstalled at the end. The sizes
# below are the measured recipe; the environment variables shrink it (tests/test_cpu_recipe.py).
set -euo pipefail

OUT=${1:-$(mktemp -d -t rlvr-cpu-recipe.XXXXXX)}
NAME=${RECIPE_ENV:-cpu_guess}
TEACHER=${TEACHER:-binary_search}  # the player whose solved games are the SFT data (policy:NAME)
GEN_TASKS=${GEN_TASKS:-1000}      # its games played (the solved ones are kept)
EVAL_TASKS=${EVAL_TASKS:-500}     # eval-split tasks, one greedy rollout each (SFT and RL models, the same tasks)
BASE_EVAL_TASKS=${BASE_EVAL_TASKS:-50}  # the untrained model's (it fills every turn: the slow evaluation)
SFT_STEPS=${SFT_STEPS:-400}       # batches of 16 games, lr 2e-3 (the model starts from random weights)
SFT_WARMUP=${SFT_WARMUP:-$(( SFT_STEPS / 10 ))}  # warm-up steps: without them the result swung 13-48% with the seed
RL_STEPS=${RL_STEPS:-300}         # batches of 64 rollouts: 8 tasks x 8 (40 gave no gain beyond noise)
RL_TASKS=${RL_TASKS:-2000}        # training tasks (the env's default 100 are learned by heart, not the search)
RL_BATCH=${RL_BATCH:-64}          # rollouts a step (groups of 8)
RL_LR=${RL_LR:-3e-5}
RL_TEMPERATURE=${RL_TEMPERATURE:-0.5}
EVAL_TOKENS=${EVAL_TOKENS:-}      # tokens a turn in evaluations (default: the env's 128)
RL_ARGS=${RL_ARGS:-}              # more rlvr train flags, e.g. "--seed 1"
ENV_ARGS=${ENV_ARGS:-}            # more env arguments for every stage, JSON members: '"high": 100'

mkdir -p "$OUT"
cd "$OUT"
INSTALL=${RECIPE_INSTALL:-1}      # 0: the caller puts the env on PYTHONPATH itself (the test does)
if [[ $INSTALL == 1 ]]; then
    trap 'pip uninstall -y -q "rlvr-${NAME//_/-}" >/dev/null 2>&1 || true' EXIT
fi
START=$(date +%s)
STAGE_START=$START

# stage NAME [EVAL_DIR]: one line with the stage's wall time (and the eval's solved rate).
stage() {
    local now result=""
    now=$(date +%s)
    if [[ $# -gt 1 ]]; then
        result=$(python - "$2" <<'PY'
import math, statistics, sys
from rlvr.results import RunDir
rows = RunDir.open(sys.argv[1]).read()  # (a NaN reward or an errored game counts as 0)
solved = statistics.fmean(r.rewards.get("solved") == 1.0 for r in rows)
fmt = statistics.fmean(x if math.isfinite(x := r.rewards.get("format_reward", 0.0)) else 0.0 for r in rows)
print(f"  solved {100 * solved:.1f}% of {len(rows)} tasks, format {100 * fmt:.1f}%")
PY
)
    fi
    printf 'stage %-10s %4ds (total %4ds)%s\n' "$1" $((now - STAGE_START)) $((now - START)) "$result"
    STAGE_START=$now
}

evaluate() {  # evaluate MODEL DIR [TASKS]: greedy, one rollout per eval task
    local tasks=${3:-$EVAL_TASKS}
    rlvr eval "$NAME" -m "$1" -a "{\"eval_tasks\": $tasks${ENV_ARGS:+, $ENV_ARGS}}" -n "$tasks" -r 1 -T 0 -o "$2" -q \
        ${EVAL_TOKENS:+-t "$EVAL_TOKENS"} >/dev/null
}

rlvr init "$NAME" --kind multi -o envs >/dev/null
if [[ $INSTALL == 1 ]]; then pip install -q -e "envs/$NAME" 2>/dev/null; fi
stage install
rlvr model new --preset tiny --corpus "$NAME" -o base >/dev/null 2>&1
rlvr gen "$NAME" -m "policy:$TEACHER" -a "{\"num_tasks\": $GEN_TASKS${ENV_ARGS:+, $ENV_ARGS}}" -f 'solved == 1' -d sft.jsonl -q >/dev/null
stage model+data
evaluate base eval/base "$BASE_EVAL_TASKS"
stage eval-base eval/base
rlvr sft -m base -d sft.jsonl -o sft --steps "$SFT_STEPS" --batch-size 16 --lr 2e-3 --lr-schedule cosine \
    --warmup-steps "$SFT_WARMUP" --eval-every none --save-every none --device cpu -q
stage sft
evaluate sft/final eval/sft
stage eval-sft eval/sft
rlvr train "$NAME" -m sft/final -o rl -a "{\"num_tasks\": $RL_TASKS${ENV_ARGS:+, $ENV_ARGS}}" --steps "$RL_STEPS" --batch-size "$RL_BATCH" --group-size 8 --max-tokens 16 \
    -T "$RL_TEMPERATURE" --lr "$RL_LR" --eval-every none --save-every 50 --device cpu -q $RL_ARGS
stage rl
evaluate rl/final eval/rl
stage eval-rl eval/rl
# RL against SFT task by task (the same eval tasks, one greedy game each): the mean difference
# and a 95% interval from 2,000 bootstrap resamples of the tasks
python - eval/sft eval/rl <<'PY'
import random, sys
from rlvr.results import RunDir
def solved(path):
    return {r.task_id: float(r.rewards.get("solved") == 1.0) for r in RunDir.open(path).read()}
sft, rl = solved(sys.argv[1]), solved(sys.argv[2])
diff = [rl[t] - sft[t] for t in sft if t in rl]
if not diff:
    sys.exit("RL - SFT: no eval task in both evaluations")
rng = random.Random(0)
means = sorted(sum(rng.choice(diff) for _ in diff) / len(diff) for _ in range(2000))
print(f"RL - SFT, the same {len(diff)} eval tasks: {100 * sum(diff) / len(diff):+.1f} points solved "
      f"(95% interval {100 * means[50]:+.1f} to {100 * means[1949]:+.1f}; "
      f"{sum(d > 0 for d in diff)} tasks gained, {sum(d < 0 for d in diff)} lost)")
PY
echo "done in $OUT: base/, sft/final, rl/final, eval/{base,sft,rl}/results.jsonl"
