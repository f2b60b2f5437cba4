#!/usr/bin/env bash
# The headline experiment, end to end: a model built from random weights learns tic-tac-toe by
# SFT on teacher games, then RL against opponents of tunable strength; every stage is evaluated
# exactly, over the whole game tree (rlvr eval --exhaustive), and on 200-game samples.
#
#   scripts/reproduce_tictactoe.sh                          # full scale, one GPU (docs/RESULTS.md)
#   GAMES=200 SFT_STEPS=60 SFT_BATCH=32 scripts/reproduce_tictactoe.sh   # the weak start
#   PRESET=tiny SCALE=smoke scripts/reproduce_tictactoe.sh  # a few minutes on a CPU
#   RECIPE=unbeatable SEED=1 scripts/reproduce_tictactoe.sh # the RL that left 2 of 3 seeds unbeatable
#   SEED=8 RECIPE=unbeatable TEACHER=limit RL_STEPS=60 RL_MAX_P=0.7 BUCKETS=8 EVAL_EVERY=10 \
#     KEEP_BEST=min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct \
#     scripts/reproduce_tictactoe.sh                        # models/tictactoe-tiny's recipe (its rl.best)
#
# RECIPE=unbeatable replaces the two phases below by docs/RESULTS.md's defence recipe
# (restarts below 0.65; 2 of 3 seeds unbeatable at their last step, 11 GPU-minutes a seed with
# two seeds a GPU): 300 steps from the empty board against an opponent whose first k <= 4 replies are random
# and whose later ones are perfect, with traps; half of each batch replays lost games (and games
# drawn after a rejected move) from before a move, walking back while the replays lose; 128
# greedy probe games a step, half after 4 random replies, whose failures are replayed too; the
# best exact evaluation kept beside the last (stage rl.best, a selection). A variable the caller
# sets wins over the recipe's.
#
# RL runs in two phases, the recipe of models/tictactoe-tiny (docs/RESULTS.md says why):
# 1. RL_STEPS against opponents whose random-move probability p is drawn from
#    [RL_MIN_P, RL_MAX_P] (BUCKETS buckets, one slice each per batch), whose best moves are traps
#    (TRAP_PROB, the env's trap_prob), in games that may start after up to OPENING_PLIES random
#    moves; LOSS_REWARD sets the value of a lost game (0 = the reference rubric).
# 2. RL2_STEPS (0 skips it) from the empty board against an opponent whose first k moves are
#    random (k up to RL2_RANDOM_REPLIES, the env's random_replies) and whose later ones are
#    perfect (p in [RL2_MIN_P, RL2_MAX_P], RL2_BUCKETS buckets), at RL2_LR and RL2_TEMP, its
#    restarts from games scored below RL2_RESTART_BELOW (default RESTART_BELOW), its turn scores'
#    weight RL2_TURN_CREDIT (default TURN_CREDIT; set empty, none in phase 2).
#
# Every stage is skipped when its output exists and resumes from its last checkpoint when it
# was cut short, so the script can be re-run across machine sessions until it completes.
set -euo pipefail

case ${RECIPE:-} in
  "") ;;
  unbeatable)
    : "${RL_STEPS:=300}" "${RL2_STEPS:=0}" "${TRAP_PROB:=1.0}" "${OPENING_PLIES:=0}" "${RANDOM_REPLIES:=4}"
    : "${RL_MAX_P:=0.0}" "${BUCKETS:=1}" "${RL_LR:=2e-5}" "${EVAL_EVERY:=25}" "${MICRO:=32}"
    : "${RESTART_FRAC:=0.5}" "${RESTART_BELOW:=0.65}" "${RESTART_POINTS:=backtrack}"
    : "${PROBE_REPLIES:=4}" "${PROBE_SHARE:=0.5}" "${RL_EXTRA:=--restart-greedy=128}"
    : "${KEEP_BEST:=min:exact/beaten_games,max:exact/random/win_pct}"
    : "${EVAL_STAGES:=base sft ${RL_NAME:-rl} ${RL_NAME:-rl}.best teacher}" ;;
  *) echo "reproduce_tictactoe.sh: unknown RECIPE '$RECIPE' (known: unbeatable)" >&2; exit 2 ;;
esac

OUT=${OUT_DIR:-runs/tictactoe}
SEED=${SEED:-0}
PRESET=${PRESET:-small}
TEACHER=${TEACHER:-teacher}   # the player whose games are the SFT data: teacher, teacher_centre (no corner habit), or limit (the 95.56% unbeatable player)
SCALE=${SCALE:-full}
DEVICE_FLAGS=${DEVICE_FLAGS:---bf16}
RL_MIN_P=${RL_MIN_P:-0.0}; RL_MAX_P=${RL_MAX_P:-0.7}; RL_LR=${RL_LR:-2e-5}; RL_TEMP=${RL_TEMP:-1.0}
RL2_MIN_P=${RL2_MIN_P:-0.0}; RL2_MAX_P=${RL2_MAX_P:-0.0}; RL2_LR=${RL2_LR:-2e-5}; RL2_TEMP=${RL2_TEMP:-1.0}
RL2_OPENING_PLIES=${RL2_OPENING_PLIES:-0}; RL2_RANDOM_REPLIES=${RL2_RANDOM_REPLIES:-4}
LOSS_REWARD=${LOSS_REWARD:-0.0}
CLAIM_PENALTY=${CLAIM_PENALTY:-}   # the env's claim_penalty: a reply whose reasoning misstates the board costs this (unset: the reference rubric)
MISSED_WIN_PENALTY=${MISSED_WIN_PENALTY:-}   # the env's missed_win_penalty: a game that leaves a win on the board costs this (unset: the reference rubric)
TURN_CREDIT=${TURN_CREDIT:-}   # rlvr train --turn-credit: the weight of the env's turn scores (tic-tac-toe: -1 a turn that leaves a win on the board)
RL2_TURN_CREDIT=${RL2_TURN_CREDIT-$TURN_CREDIT}   # phase 2's (e.g. 0.5 with TURN_CREDIT unset: turn scores in phase 2 alone)
TRAP_PROB=${TRAP_PROB:-1.0}   # how often the opponent's best move is a trap (env option trap_prob)
OPENING_PLIES=${OPENING_PLIES:-4}   # training games may start after up to this many random moves
OPENING_HISTORY=${OPENING_HISTORY:-false}   # true: such starts are shown as the conversation that led there
RANDOM_REPLIES=${RANDOM_REPLIES:-0}   # the opponent's first k <= this moves are random, then p and traps
PROBE_REPLIES=${PROBE_REPLIES:-}   # greedy probes (RL_EXTRA=--restart-greedy=N): their k, fixed (env option probe_random_replies)
PROBE_SHARE=${PROBE_SHARE:-}       # with PROBE_REPLIES: the share of probes that get it (env option probe_random_share)
RESTART_FRAC=${RESTART_FRAC:-0}   # share of each RL batch that replays a training game lost (scored below
RESTART_BELOW=${RESTART_BELOW:-0.5}   # RESTART_BELOW) from before one of its moves (rlvr train --restart-frac)
RL2_RESTART_BELOW=${RL2_RESTART_BELOW:-$RESTART_BELOW}   # phase 2's (0.9: clean draws, 0.7, too; a win scores 1.2)
RESTART_POINTS=${RESTART_POINTS:-random}   # restart from one later move drawn at random, all of them, or backtrack
RESTART_UNSURE=${RESTART_UNSURE:-}   # with greedy probes: also restart before their turns whose reply had a probability below this
RESTART_EXPLORE=${RESTART_EXPLORE:-}   # in each restart's group, this many rollouts are given a move the teacher might make there
RESTART_EXPLORE_WEIGHT=${RESTART_EXPLORE_WEIGHT:-}   # with RESTART_EXPLORE: the advantage on a given move's own tokens is multiplied by this
KEEP_BEST=${KEEP_BEST:-}   # e.g. min:exact/beaten_games: also keep RUN/best, evaluated as stage RUN.best (a selection)
RL2_KEEP_BEST=${RL2_KEEP_BEST:-$KEEP_BEST}   # phase 2's, e.g. "exact/optimal/draw_pct>=97,max:exact/random/win_pct"
RL_EXTRA=${RL_EXTRA:-}   # more `rlvr train` flags for the RL phases, e.g. "--kl-coef 0.05"
SFT_EXTRA=${SFT_EXTRA:-}   # more `rlvr sft` flags, e.g. --deterministic (on a GPU: the same SFT model for a seed every time)
EXACT=${EXACT:-1}   # 0: no exact evaluation (the smoke scale, where a barely trained model is slow to walk)
RL_NAME=${RL_NAME:-rl}   # another name runs another RL variant from the same SFT model, side by side
EVAL_STAGES=${EVAL_STAGES:-base sft $RL_NAME ${RL_NAME}2 teacher}
if [ "$SCALE" = smoke ]; then
  GAMES=300; SFT_STEPS=10; SFT_BATCH=16; RL_STEPS=2; RL2_STEPS=${RL2_STEPS:-1}; BATCH=16; GROUP=4; RL2_BUCKETS=1
  BUCKETS=$([ "${BUCKETS:-8}" = 1 ] && echo 1 || echo 4)   # (a plan's one bucket, p fixed, stays one)
  EVAL_GAMES=10; EVAL_TASKS=4; EVAL_EVERY=2; DEVICE_FLAGS=""; EXACT=0
else
  GAMES=${GAMES:-20000}; SFT_STEPS=${SFT_STEPS:-1000}; SFT_BATCH=${SFT_BATCH:-64}
  RL_STEPS=${RL_STEPS:-80}; RL2_STEPS=${RL2_STEPS:-100}
  BATCH=${BATCH:-256}; GROUP=${GROUP:-8}; BUCKETS=${BUCKETS:-8}; RL2_BUCKETS=${RL2_BUCKETS:-1}
  EVAL_GAMES=${EVAL_GAMES:-200}; EVAL_TASKS=${EVAL_TASKS:-64}; EVAL_EVERY=${EVAL_EVERY:-20}
fi
[ "$EXACT" = 1 ] || KEEP_BEST="" RL2_KEEP_BEST=""   # a kept best is chosen by exact evaluations: none at the smoke scale
RL_DEVICE_FLAGS=${DEVICE_FLAGS:---no-bf16}   # DEVICE_FLAGS (--bf16 by default: bf16 autocast) at full scale; the CPU smoke scale clears it: --no-bf16
mkdir -p "$OUT"
log() { printf '\n== %s [%s]\n' "$*" "$(date +%H:%M:%S)"; }
stamp() { date +%s > "$OUT/$1.start"; }
done_in() { echo $(( $(date +%s) - $(cat "$OUT/$1.start") )) > "$OUT/$1.seconds"; }

# 1. base model: random weights, tokenizer trained on tic-tac-toe text. Steps 1 to 3 only feed
# RL's first phase (and the base's own evaluation): skipped where the SFT model is there, e.g. RL
# from the shipped model, whose variants side by side in one OUT_DIR would otherwise write one
# file together, or where the first phase is done (its final model alone in OUT_DIR/RL_NAME/final)
have_sft() { [ -f "$OUT/sft/final/config.json" ]; }
sft_done() { have_sft || [ -f "$OUT/$RL_NAME/final/config.json" ]; }
made_by=$(cat "$OUT/teacher.name" 2>/dev/null || echo teacher)   # the SFT data's player (none recorded: teacher)
if { [ -f "$OUT/teacher.jsonl" ] || have_sft; } && [ "$made_by" != "$TEACHER" ]; then  # a resume would reuse it
  echo "reproduce_tictactoe.sh: $OUT's SFT data came from policy:$made_by, not TEACHER=$TEACHER: use another OUT_DIR" >&2
  exit 2
fi
if [ ! -f "$OUT/base/config.json" ] \
  && { ! sft_done || { [[ " $EVAL_STAGES " == *" base "* ]] && have_sft; }; }; then
  # (a restored first phase alone: a base model made here now is not the one it came from)
  log "base model ($PRESET)"; stamp base
  rlvr model new --preset "$PRESET" --corpus tictactoe --seed "$SEED" -o "$OUT/base"
  done_in base
fi

# 2. SFT data: teacher games, lost games and imperfect format filtered out
if [ ! -f "$OUT/teacher.jsonl" ] && ! sft_done; then
  log "teacher games ($GAMES)"; stamp gen
  rlvr gen tictactoe -m "policy:$TEACHER" -n -1 -r 1 -q -d "$OUT/teacher.jsonl.part" --overwrite \
    -a "{\"num_tasks\": $GAMES, \"seed\": $((SEED + 100))}" \
    --filter 'loss == 0 and timeout == 0 and format_reward == 1 and invalid_moves == 0'
  echo "$TEACHER" > "$OUT/teacher.name"   # (before the data: a kill between the two leaves no data to reuse)
  mv "$OUT/teacher.jsonl.part" "$OUT/teacher.jsonl"
  done_in gen
fi

# 3. SFT warm-up
if ! sft_done; then
  log "SFT ($SFT_STEPS steps x $SFT_BATCH)"; stamp sft
  resume=""; [ -d "$OUT/sft/checkpoints" ] && resume="--resume"
  rlvr sft --model "$OUT/base" --data "$OUT/teacher.jsonl" -o "$OUT/sft" $resume -q \
    --steps "$SFT_STEPS" --batch-size "$SFT_BATCH" --micro-batch-size "$SFT_BATCH" --lr 1e-3 \
    --warmup-steps $(( SFT_STEPS < 500 ? SFT_STEPS / 10 : 50 )) --lr-schedule cosine \
    --eval-every 100 --save-every 250 --seed "$SEED" $DEVICE_FLAGS $SFT_EXTRA
  done_in sft
fi

# 4. RL: opponents of mixed strength, stratified batches, exact evaluation every EVAL_EVERY steps
rl() {  # rl NAME FROM STEPS MIN_P MAX_P LR TEMPERATURE BUCKETS OPENING_PLIES RANDOM_REPLIES RESTART_BELOW KEEP_BEST CREDIT
  local name=$1 from=$2 steps=$3 low=$4 high=$5 lr=$6 temp=$7 buckets=$8 plies=$9 replies=${10} below=${11} keep=${12} credit=${13}
  if [ "$steps" -gt 0 ] && [ -f "$from/config.json" ] && [ ! -f "$OUT/$name/final/config.json" ]; then
    local env_args="{\"min_random_move_prob\": $low, \"max_random_move_prob\": $high, \"loss_reward\": $LOSS_REWARD, \"trap_prob\": $TRAP_PROB, \"opening_plies\": $plies, \"opening_history\": $OPENING_HISTORY, \"random_replies\": $replies${PROBE_REPLIES:+, \"probe_random_replies\": $PROBE_REPLIES}${PROBE_SHARE:+, \"probe_random_share\": $PROBE_SHARE}${CLAIM_PENALTY:+, \"claim_penalty\": $CLAIM_PENALTY}${MISSED_WIN_PENALTY:+, \"missed_win_penalty\": $MISSED_WIN_PENALTY}}"
    log "RL $name ($steps steps, $env_args, lr $lr, T $temp)"; stamp "$name"
    resume=""; [ -d "$OUT/$name/checkpoints" ] && resume="--resume"
    rlvr train tictactoe --model "$from" --output-dir "$OUT/$name" $resume -q \
      --steps "$steps" --batch-size "$BATCH" --group-size "$GROUP" --num-buckets "$buckets" --loss cispo \
      --max-tokens 48 --micro-batch-size "${MICRO:-64}" --seed "$SEED" --env-args "$env_args" --lr "$lr" --temperature "$temp" \
      --eval-env-args '[{"opponent": "random"}, {"opponent": "optimal"}]' $([ "$EXACT" = 1 ] && echo --eval-exact) \
      --eval-every "$EVAL_EVERY" --eval-tasks "$EVAL_TASKS" --save-every "$EVAL_EVERY" $RL_DEVICE_FLAGS $RL_EXTRA \
      --restart-frac "$RESTART_FRAC" --restart-below "$below" --restart-points "$RESTART_POINTS" \
      ${keep:+--keep-best "$keep"} ${RESTART_UNSURE:+--restart-unsure "$RESTART_UNSURE"} \
      ${RESTART_EXPLORE:+--restart-explore "$RESTART_EXPLORE"} ${credit:+--turn-credit "$credit"} \
      ${RESTART_EXPLORE_WEIGHT:+--restart-explore-weight "$RESTART_EXPLORE_WEIGHT"}
    done_in "$name"
  fi
}
rl "$RL_NAME" "$OUT/sft/final" "$RL_STEPS" "$RL_MIN_P" "$RL_MAX_P" "$RL_LR" "$RL_TEMP" "$BUCKETS" "$OPENING_PLIES" "$RANDOM_REPLIES" \
  "$RESTART_BELOW" "$KEEP_BEST" "$TURN_CREDIT"
rl "${RL_NAME}2" "$OUT/$RL_NAME/final" "$RL2_STEPS" "$RL2_MIN_P" "$RL2_MAX_P" "$RL2_LR" "$RL2_TEMP" "$RL2_BUCKETS" \
  "$RL2_OPENING_PLIES" "$RL2_RANDOM_REPLIES" "$RL2_RESTART_BELOW" "$RL2_KEEP_BEST" "$RL2_TURN_CREDIT"

# 5. evaluation of every stage: exact (the whole game tree, greedy), and 200-game greedy samples
#    on held-out seeds against the random and the optimal opponent (the reference's columns).
#    A stage's cells run side by side; a complete cell is skipped, a partial one resumes.
eval_cell() {  # eval_cell STAGE MODEL OPPONENT
  local dir="$OUT/eval/$1-$3"
  [ -f "$dir/metadata.json" ] && grep -q '"status": "complete"' "$dir/metadata.json" && return 0
  if [ "$3" = exact ]; then
    rlvr eval tictactoe -m "$2" --exhaustive -t 48 -c 1024 -q -o "$dir" --resume > "$dir.log" 2>&1
  else
    rlvr eval tictactoe -m "$2" -a "{\"opponent\": \"$3\", \"eval_tasks\": $EVAL_GAMES}" -n -1 -r 1 -T 0 -t 48 \
      -c 256 -q -o "$dir" --resume > "$dir.log" 2>&1
  fi || { echo "eval $1 vs $3 failed:"; tail -20 "$dir.log"; return 1; }
}
cells_done() {  # cells_done RUN OPPONENT...: every evaluation cell of RUN finished
  local run=$1 opp; shift
  for opp in "$@"; do grep -qs '"status": "complete"' "$OUT/eval/$run-$opp/metadata.json" || return 1; done
}
same_as_final() {  # same_as_final RUN: RUN's kept best holds its final model's weights files, byte for byte
  local f names
  names=$(cd "$OUT/$1/best" && ls -- *.safetensors 2> /dev/null) || return 1
  [ "$names" = "$(cd "$OUT/$1/final" && ls -- *.safetensors 2> /dev/null)" ] || return 1
  for f in $names; do cmp -s "$OUT/$1/best/$f" "$OUT/$1/final/$f" || return 1; done
}
mkdir -p "$OUT/eval"; stamp eval
for stage in $EVAL_STAGES; do
  run=${stage%.best} opps="random optimal"
  model="$OUT/$stage/final"; [ "$stage" = base ] && model="$OUT/base"; [ "$stage" = teacher ] && model="policy:$TEACHER"
  [ "$run" != "$stage" ] && model="$OUT/$run/best"  # RUN.best: RUN's kept best (KEEP_BEST)
  [ "$stage" = teacher ] || [ -f "$model/config.json" ] || continue
  if [ "$EXACT" = 1 ]; then opps="exact $opps"; fi  # (an assignment of a failing $(...) would end the script)
  if [ "$run" != "$stage" ] && cells_done "$run" $opps && same_as_final "$run"; then  # the last step was kept:
    log "eval $stage: the weights of $run, already evaluated"  # its cells are RUN's (no second evaluation)
    for opp in $opps; do
      [ -L "$OUT/eval/$stage-$opp" ] || rm -rf "$OUT/eval/$stage-$opp"  # (a cut evaluation of it)
      ln -sfn "$run-$opp" "$OUT/eval/$stage-$opp"
    done
    continue
  fi
  log "eval $stage"
  pids=()
  for opp in $opps; do eval_cell "$stage" "$model" "$opp" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
done_in eval
python scripts/tictactoe_table.py "$OUT" --stages "$(echo $EVAL_STAGES | tr ' ' ',')" | tee "$OUT/table-$RL_NAME.md"
