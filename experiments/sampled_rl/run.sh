#!/usr/bin/env bash
# RL at the temperature the model is played at (T = 1), from a trained tic-tac-toe model, then
# 1,000-game sampled evaluations at T = 1 of the start, the kept best and the last model.
#
#   experiments/sampled_rl/run.sh MODEL RUN_DIR [STEPS]
#
# The plan is fixed before any run: the shipped model's RL recipe (random first k <= 4 replies,
# later ones random with p in [0, 0.7], perfect with traps otherwise; half of each batch restarts
# games scored below 0.65, walking back; 128 greedy probes a step) at half its learning rate
# (1e-5), so that the greedy policy, which is already unbeatable, moves less while the sampled
# one sharpens. The kept best is chosen by the trainer's greedy exact evaluations (a selection):
# fewest beaten games, then fewest games with a rejected move, then most wins against random.
# TRAIN_SECONDS bounds the training (it resumes from its last checkpoint when run again).
# TRAIN_TEMP (default 1) is the rollouts' temperature: above 1, the low-probability moves that
# lose when the model samples at T = 1 are drawn, and so penalised, more often.
set -euo pipefail
MODEL=$1 RUN=$2 STEPS=${3:-150}
TRAIN_SECONDS=${TRAIN_SECONDS:-380}
ENV_ARGS='{"min_random_move_prob": 0.0, "max_random_move_prob": 0.7, "trap_prob": 1.0, "opening_plies": 0,
  "random_replies": 4, "probe_random_replies": 4, "probe_random_share": 0.5}'
mkdir -p "$RUN"
resume=""; [ -d "$RUN/rl/checkpoints" ] && resume="--resume"
timeout "$TRAIN_SECONDS" rlvr train tictactoe --model "$MODEL" -o "$RUN/rl" $resume -q \
  --steps "$STEPS" --batch-size 256 --group-size 8 --num-buckets 8 --loss cispo --lr 1e-5 -T "${TRAIN_TEMP:-1}" \
  --max-tokens 48 --micro-batch-size 64 --seed 1 --env-args "$ENV_ARGS" --bf16 \
  --restart-frac 0.5 --restart-below 0.65 --restart-points backtrack --restart-greedy 128 \
  --eval-env-args '[{"opponent": "random"}, {"opponent": "optimal"}]' --eval-exact --eval-tasks 64 \
  --eval-every 25 --save-every 25 \
  --keep-best "min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct" \
  || echo "training stopped (exit $?): evaluating what it saved"

last=$(ls -d "$RUN"/rl/checkpoints/step_*/model 2> /dev/null | sort | tail -1 || true)
[ -f "$RUN/rl/final/config.json" ] && last="$RUN/rl/final"
for stage in start best last; do
  case $stage in start) m=$MODEL ;; best) m=$RUN/rl/best ;; last) m=${last:-} ;; esac
  [ -n "$m" ] && [ -f "$m/config.json" ] || { echo "no $stage model"; continue; }
  for opp in optimal random; do
    rlvr eval tictactoe -m "$m" -a "{\"opponent\": \"$opp\", \"eval_tasks\": 1000}" -n -1 -r 1 -T 1 -t 256 \
      -c 256 -q -o "$RUN/eval/$stage-$opp" --resume > "$RUN/eval-$stage-$opp.log" 2>&1 || tail -5 "$RUN/eval-$stage-$opp.log"
  done
done
python3 - "$RUN" << 'EOF'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
for path in sorted(run.glob("eval/*/results.jsonl")):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    m = [r.get("rewards") or {} for r in rows]
    lost = sum(1 for x in m if x.get("loss", 0) > 0)
    won = sum(1 for x in m if x.get("win", 0) > 0)
    bad = sum(1 for x in m if x.get("invalid_moves", 0) > 0)
    err = sum(1 for r in rows if r.get("error"))
    print(f"{path.parent.name:16s} games {len(rows):5d}  W/D/L {won}/{len(rows) - won - lost}/{lost}"
          f"  rejected-move games {bad}  errors {err}")
EOF
