#!/usr/bin/env bash
# The headline experiment, end to end: a model built from random weights learns tic-tac-toe by
# SFT on teacher games, then RL against opponents of tunable strength.
#
#   scripts/reproduce_tictactoe.sh                 # full scale, one GPU (see docs/RESULTS.md)
#   PRESET=tiny SCALE=smoke scripts/reproduce_tictactoe.sh   # a few minutes on a CPU
#
# Every stage is skipped when its output exists and resumes from its last checkpoint when it
# was cut short, so the script can be re-run across machine sessions until it completes.
set -euo pipefail

OUT=${OUT_DIR:-runs/tictactoe}
SEED=${SEED:-0}
PRESET=${PRESET:-small}
SCALE=${SCALE:-full}
DEVICE_FLAGS=${DEVICE_FLAGS:---bf16}
if [ "$SCALE" = smoke ]; then
  GAMES=300; SFT_STEPS=10; RL1_STEPS=2; RL2_STEPS=2; BATCH=16; GROUP=4; BUCKETS=4; EVAL_GAMES=10; EVAL_TASKS=4; DEVICE_FLAGS=""
else
  GAMES=${GAMES:-20000}; SFT_STEPS=${SFT_STEPS:-1000}; RL1_STEPS=${RL1_STEPS:-50}; RL2_STEPS=${RL2_STEPS:-100}
  BATCH=${BATCH:-256}; GROUP=${GROUP:-8}; BUCKETS=${BUCKETS:-8}; EVAL_GAMES=${EVAL_GAMES:-200}; EVAL_TASKS=${EVAL_TASKS:-100}
fi
mkdir -p "$OUT"
log() { printf '\n== %s [%s]\n' "$*" "$(date +%H:%M:%S)"; }
stamp() { date +%s > "$OUT/$1.start"; }
done_in() { echo $(( $(date +%s) - $(cat "$OUT/$1.start") )) > "$OUT/$1.seconds"; }

# 1. base model: random weights, tokenizer trained on tic-tac-toe text
if [ ! -f "$OUT/base/config.json" ]; then
  log "base model ($PRESET)"; stamp base
  rlvr model new --preset "$PRESET" --corpus tictactoe --seed "$SEED" -o "$OUT/base"
  done_in base
fi

# 2. SFT data: teacher games, lost games and imperfect format filtered out
if [ ! -f "$OUT/teacher.jsonl" ]; then
  log "teacher games"; stamp gen
  rlvr gen tictactoe -m policy:teacher -n -1 -r 1 -q -o "$OUT/teacher.jsonl.part" --overwrite \
    -a "{\"num_tasks\": $GAMES, \"seed\": $((SEED + 100))}" \
    --filter 'loss == 0 and timeout == 0 and format_reward == 1 and invalid_moves == 0'
  mv "$OUT/teacher.jsonl.part" "$OUT/teacher.jsonl"
  done_in gen
fi

# 3. SFT warm-up
if [ ! -f "$OUT/sft/final/config.json" ]; then
  log "SFT ($SFT_STEPS steps)"; stamp sft
  resume=""; [ -d "$OUT/sft/checkpoints" ] && resume="--resume"
  rlvr sft --model "$OUT/base" --data "$OUT/teacher.jsonl" -o "$OUT/sft" $resume -q \
    --max-steps "$SFT_STEPS" --batch-size 64 --micro-batch-size 64 --lr 1e-3 --warmup-steps 50 \
    --lr-schedule cosine --eval-every 100 --save-every 250 --seed "$SEED" $DEVICE_FLAGS
  done_in sft
fi

# 4. RL phase 1: a mix of opponent strengths, stratified batches
rl() {  # rl NAME FROM STEPS ENV_ARGS EXTRA...
  local name=$1 from=$2 steps=$3 env_args=$4; shift 4
  if [ "$steps" -gt 0 ] && [ -f "$from/config.json" ] && [ ! -f "$OUT/$name/final/config.json" ]; then
    log "RL $name ($steps steps, $env_args)"; stamp "$name"
    resume=""; [ -d "$OUT/$name/checkpoints" ] && resume="--resume"
    rlvr train tictactoe --model "$from" --output-dir "$OUT/$name" $resume -q \
      --steps "$steps" --batch-size "$BATCH" --group-size "$GROUP" --num-buckets "$BUCKETS" --loss cispo \
      --max-tokens 48 --micro-batch-size 64 --seed "$SEED" --env-args "$env_args" \
      --eval-env-args '[{"opponent": "random"}, {"opponent": "optimal"}]' \
      --eval-every 25 --eval-tasks "$EVAL_TASKS" --save-every 25 $DEVICE_FLAGS "$@"
    done_in "$name"
  fi
}
rl rl1 "$OUT/sft/final" "$RL1_STEPS" '{"min_random_move_prob": 0.2, "max_random_move_prob": 0.7}' --lr 5e-5
# 5. RL phase 2: stronger opponents, hotter sampling
rl rl2 "$OUT/rl1/final" "$RL2_STEPS" '{"min_random_move_prob": 0.0, "max_random_move_prob": 0.25}' --lr 3e-5 --temperature 1.25

# 6. evaluation: held-out seeds, random and optimal opponents, plus an optimal opponent whose
#    tie-breaks come from another seed stream. A stage's three cells run side by side (each one
#    leaves the GPU mostly idle); a cell that is complete is skipped, a partial one resumes.
eval_cell() {  # eval_cell STAGE MODEL OPPONENT
  local dir="$OUT/eval/$1-$3" args="{\"opponent\": \"${3%-reseeded}\", \"eval_tasks\": $EVAL_GAMES"
  [ -f "$dir/metadata.json" ] && grep -q '"status": "complete"' "$dir/metadata.json" && return 0
  [ "$3" = optimal-reseeded ] && args="$args, \"eval_seed\": $((SEED + 7919))"
  rlvr eval tictactoe -m "$2" -a "$args}" -n -1 -r 1 -T 0 -t 48 -c 256 -q -o "$dir" --resume \
    > "$OUT/eval/$1-$3.log" 2>&1 || { echo "eval $1 vs $3 failed:"; tail -20 "$OUT/eval/$1-$3.log"; return 1; }
}
mkdir -p "$OUT/eval"; stamp eval
for stage in base sft rl1 rl2 teacher; do
  model="$OUT/$stage/final"; [ "$stage" = base ] && model="$OUT/base"; [ "$stage" = teacher ] && model=policy:teacher
  [ "$stage" = teacher ] || [ -f "$model/config.json" ] || continue
  log "eval $stage"
  pids=()
  for opp in random optimal optimal-reseeded; do eval_cell "$stage" "$model" "$opp" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
done_in eval
python scripts/tictactoe_table.py "$OUT" | tee "$OUT/table.md"
