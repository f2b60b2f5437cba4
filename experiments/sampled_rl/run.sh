#!/usr/bin/env bash
# RL at (or above) the temperature a model is played at, from a trained tic-tac-toe model, then
# 1,000-game sampled evaluations at T = 1 of the kept best against the optimal and the random
# opponent.
#
#   experiments/sampled_rl/run.sh MODEL RUN_DIR [STEPS]
#
# The plan is fixed before any run: the shipped model's RL recipe (random first k <= 4 replies,
# later ones random with p in [0, 0.7], perfect with traps otherwise; half of each batch restarts
# games scored below 0.65, walking back; 128 greedy probes a step), rollouts at TRAIN_TEMP
# (default 1; above 1 the low-probability moves that lose at T = 1 are drawn, and so penalised,
# more often), learning rate LR (default 1e-5). Evaluation sets of EVAL_TASKS games against each
# opponent are sampled at T = 1 (`--eval-temperature 1`) every EVAL_EVERY steps, beside the greedy
# exact evaluation. The kept best (a selection by these evaluations) is the model whose greedy
# play loses no game of the tree, has no rejected move and wins >= 95% against random, with the
# fewest sampled losses against the optimal opponent, then against random.
# SHARPEN (default 0) adds that weight x each game's own log-probability, less its group's mean,
# to its advantage (`--sharpen`, docs/training.md): entropy minimisation, toward the greedy play.
# TRAIN_SECONDS bounds the training (it resumes from its last checkpoint when run again).
# FINAL_GAMES (default 1000) sets the size of those sampled evaluations; 0 skips them (when an
# exact evaluation, `rlvr eval --exhaustive -T 1`, follows instead).
# Every 10 steps, not 25: the greedy guarantees come and go between evaluations (a rejected-move
# game at one, none at the next), so sparse evaluations may offer no model that keeps them.
set -euo pipefail
MODEL=$1 RUN=$2 STEPS=${3:-150}
TRAIN_SECONDS=${TRAIN_SECONDS:-400} EVAL_TASKS=${EVAL_TASKS:-400} EVAL_EVERY=${EVAL_EVERY:-10}
ENV_ARGS='{"min_random_move_prob": 0.0, "max_random_move_prob": 0.7, "trap_prob": 1.0, "opening_plies": 0,
  "random_replies": 4, "probe_random_replies": 4, "probe_random_share": 0.5}'
EVAL_SETS="[{\"opponent\": \"random\", \"eval_tasks\": $EVAL_TASKS}, {\"opponent\": \"optimal\", \"eval_tasks\": $EVAL_TASKS}]"
KEEP="exact/beaten_games<=0,exact/rejected_move_games<=0,exact/random/win_pct>=95"
set_label="eval/eval_tasks=${EVAL_TASKS}_opponent"  # an evaluation set is labelled by its env args
KEEP="$KEEP,min:${set_label}=optimal/reward/loss,min:${set_label}=random/reward/loss"
mkdir -p "$RUN"
resume=""; [ -d "$RUN/rl/checkpoints" ] && resume="--resume"
timeout "$TRAIN_SECONDS" rlvr train tictactoe --model "$MODEL" -o "$RUN/rl" $resume -q \
  --steps "$STEPS" --batch-size 256 --group-size 8 --num-buckets 8 --loss cispo --lr "${LR:-1e-5}" \
  -T "${TRAIN_TEMP:-1}" --sharpen "${SHARPEN:-0}" --max-tokens 48 --micro-batch-size 64 --seed "${SEED:-1}" --env-args "$ENV_ARGS" --bf16 \
  --restart-frac 0.5 --restart-below 0.65 --restart-points backtrack --restart-greedy 128 \
  --eval-env-args "$EVAL_SETS" --eval-tasks "$EVAL_TASKS" --eval-temperature 1 --eval-exact \
  --eval-every "$EVAL_EVERY" --save-every "$EVAL_EVERY" --keep-best "$KEEP" \
  || echo "training stopped (exit $?): evaluating what it kept"

for opp in optimal random; do
  [ "${FINAL_GAMES:-1000}" -gt 0 ] || break
  [ -f "$RUN/rl/best/config.json" ] || { echo "no kept model"; break; }
  rlvr eval tictactoe -m "$RUN/rl/best" -a "{\"opponent\": \"$opp\", \"eval_tasks\": ${FINAL_GAMES:-1000}}" -n -1 -r 1 -T 1 -t 256 \
    -c 256 -q -o "$RUN/eval/best-$opp" --resume > "$RUN/eval-best-$opp.log" 2>&1 || tail -5 "$RUN/eval-best-$opp.log"
done
python3 "$(dirname "$0")/summary.py" "$RUN"
