#!/usr/bin/env bash
# Run several tic-tac-toe pipelines (scripts/reproduce_tictactoe.sh) side by side on one host:
# each job gets one GPU, and each job's RL variants share that GPU, started once its SFT is done.
#
#   scripts/tictactoe_gpus.sh start PLAN     # start the plan's jobs in the background (setsid)
#   scripts/tictactoe_gpus.sh wait SECONDS [DIR]  # wait until every job ended or SECONDS passed, print the
#                                            # summary (each run's step and exact curve);
#                                            # with DIR, then collect into DIR (end every device call
#                                            # so: a machine lost between calls keeps nothing);
#                                            # with BUNDLE=1, also `bundle "$(best)" DIR` (the
#                                            # idle release is 30 s: a run's weights may not wait
#                                            # for the next call); with BUNDLE_FROM="SEED/RUN ..."
#                                            # (e.g. "s2/rlGX s3/rlGX"), also packs each RUN's
#                                            # first-phase final model there yet into
#                                            # RUNS/packed/SEED-RUN (again only when it changed),
#                                            # and sends what fits: what their second phases
#                                            # start from (`restore` each on the next machine);
#                                            # a key naming a model folder, e.g. s2/rlGX2/best
#                                            # (a kept best), packs that (NAME s2-rlGX2-best);
#                                            # packs only what the call's files can take (the
#                                            # collection and a pack take 10-15 s each on an H200
#                                            # host: SECONDS + 40 must fit the call's limit; a
#                                            # pack cut short is redone whole)
#   scripts/tictactoe_gpus.sh send DIR [NAME...]  # packed models (all not yet sent, or the NAMEs) into
#                                            # DIR/NAME while DIR stays under 64 MiB, $OUT's limit
#                                            # for a call's files together (a 17.6M model is 34 MB:
#                                            # one a call); says which wait for the next call
#   scripts/tictactoe_gpus.sh collect DIR    # tables, metrics, logs, exact summaries, plots -> DIR/runs.tgz
#                                            # (wait's collection leaves the plots out: a short reply)
#   scripts/tictactoe_gpus.sh ship MODEL DIR # a model folder (best's answer) in bfloat16, shards under 15 MB
#   scripts/tictactoe_gpus.sh bundle MODEL DIR  # ship MODEL, as DIR/model.tar.00, .01, ... (15 MB
#                                            # each: $OUT takes 8 files, 64 MiB together, and
#                                            # a model folder has 9);
#                                            # back here: cat DIR/model.tar.* | tar x -C DEST
#   scripts/tictactoe_gpus.sh pack DIR NAME=MODEL...  # several models in one such archive, folders NAME
#   scripts/tictactoe_gpus.sh restore DIR RUNS/SEED/RUN  # a bundle (its folder model, else SEED-RUN)
#                                            # as RUN's final model, from which
#                                            # `start` runs only the second phases: the pipeline
#                                            # skips base, data and SFT where RUN's first phase
#                                            # is done (carry the folder to the device: `run`'s
#                                            # carry, 64 MiB in all with the tracked tree: move
#                                            # models/tictactoe-tiny, 34 MB, aside for that call
#                                            # and back after; one restored model a call: the
#                                            # machine keeps an earlier call's carried folders
#                                            # while it is held); RUN/restored_from names DIR.
#                                            # A carried folder replaces the device's copy, runs
#                                            # an earlier call wrote under it included: carry one
#                                            # the next runs do not write into (a new RUNS), and
#                                            # chain a call's steps with && or `set -e` (a failed
#                                            # step before `export RUNS=...` runs the defaults)
#   scripts/tictactoe_gpus.sh summary        # every stage's exact table, kept bests, exact curves
#   scripts/tictactoe_gpus.sh best           # the RL model (final, or a kept best) losing the fewest games,
#                                            # then with the fewest rejected-move games, then most
#                                            # wins; or by BEST_BY, a keep_best order (plans
#                                            # weakwins2/3: the most wins with >= 97% draws, their
#                                            # target); a run not yet evaluated (still going) by its
#                                            # kept best's record; never a restored first phase
#
# Plans (docs/RESULTS.md says which produced what; the shipped models/tictactoe-tiny is seed 8 of
# `limit` (RL_STEPS=60), `rlLM`'s kept best; the one shipped before it seed 0 of `explore`,
# variant A, then `rlR` of `replies`, then `rlW0` of `wins`, then `rlWT`'s kept best of `points`):
#   pilot  one GPU: seed 0, short SFT and RL, variants A and B side by side (step times)
#   pilot2 one GPU: seed 0, full SFT, four conservative RL variants (lr, KL, temperature, opponents)
#   main   four GPUs: seeds 0, 1, 2 (full SFT) and the weak start (200 teacher games), each with
#          variant A (lr 3e-5) and B (lr 2e-5 at T 1.25) from the same SFT model
#   trap   four GPUs: as main, 100 RL steps, against an opponent whose best moves are traps
#   explore four GPUs: traps, and training games from random positions (up to 4 random moves)
#   history two GPUs: seeds 0, 1 (GPU 0), 2 and the weak start (GPU 1); 100 RL steps from
#          random starts shown as the conversation that led there (opening_history, 6 plies)
#   long   three GPUs (0-2): seeds 0, 1, 2; the explore recipe for 120 steps, and the same with
#          loss_reward = -1 (a lost game scores below a draw by 1.5 instead of 0.5)
#   replies four GPUs: seeds 0, 1, 2; RL games from the empty board whose opponent's first k
#          moves (k up to 4) are random, then perfect with traps (rlR: p = 0; rlR3: p <= 0.3).
#          GPU 3: the weak start (300 SFT steps on 200 games) and the shipped model, rlR each
#   recipe one GPU per seed (SEEDS, default 0-3): the shipped model's recipe (rl: explore, then
#          rl2: replies, reproduce_tictactoe.sh's defaults) and beside it rlR for 200 steps
#   weak   one GPU (WEAK_GPU, default 0; not run yet): the weak start (300 SFT steps on 200
#          teacher games), then rlR for RL_STEPS (default 300), exact evaluations every 25 steps
#   restarts one GPU per seed (SEEDS, default 0-2, "" = none): rlR's recipe with restarts of lost training
#          games (a quarter (rlS) or half (rlS5) of each batch, `rlvr train --restart-frac`), 150
#          steps from a fresh SFT; GPU EXTRA_GPU (default 3, "" = none): the weak start with rlS
#          for 200 steps, and the shipped model with rlW0's recipe plus restarts of every game
#          not won (rlWS, 120 steps)
#   points one GPU per seed (SEEDS): restarts from every later move of a lost game (rlP: constant
#          lr; rlPc: cosine), 250 steps, the best exact evaluation kept too (RUN.best, a selection);
#          GPU EXTRA_GPU: the weak start with rlP, and the shipped model at T 1.5 (rlWT, wins)
#   backtrack one GPU per seed (SEED_GPUS to share): restarts that walk back one move at a time
#          while the whole group loses again (rlK) beside rlP (CONTROL="": without), 300 steps;
#          GPU EXTRA_GPU: the weak start, rlK
#   average one GPU per seed (SEED_GPUS to share): rlK beside rlKe, rlK whose evaluations, kept
#          best and final model are the weight average (--ema-decay 0.98), 250 steps; GPU
#          EXTRA_GPU: the weak start, rlKe
#   sharpen one GPU per seed: rlK for 250 steps, then 100 more at T 0.6 (rlK2); beside it rlK
#          again from the same SFT (rlJ) and 100 more at T 1 (rlJ2)
#   greedy one GPU per seed: rlK plus restarts from 64 greedy probe games a step (rlG,
#          --restart-greedy 64), twice from the same SFT (rlG, rlGb: the spread of one recipe),
#          350 steps; GPU EXTRA_GPU: the weak start with rlG, and the shipped model with rlW0's
#          recipe plus backtracking restarts of every game not won, probes included (rlWG, 120
#          steps). Run with RL_STEPS=250 WEAK_STEPS=250 (seeds 1 and 2 resumed to 350 by hand)
#   cover  one GPU per seed: rlG with more probes (PROBES, default 128), a share of them
#          (PROBE_SHARE, default 0.5; the env's probe_random_share) against an opponent whose
#          first 4 replies are random (PROBE_REPLIES=4, probe_random_replies), twice from the
#          same SFT (rlC, rlCb; TWIN="": rlC alone), 350 steps; GPU EXTRA_GPU: the weak start with rlC.
#          Why: plan greedy's last lost lines each came up in 1 to 4 of 10,000 probe games
#          (scripts/tictactoe_line_odds.py). Run with PROBE_SHARE=1 for 100 steps (ninth session):
#          no probe met the opposite-corner trap, which stayed in every run. As it is (tenth
#          session): 3 of 6 runs unbeatable at step 350, one per seed. RESTART_BELOW=0.65 also
#          restarts games drawn with a rejected move (twelfth session, TWIN="", 300 steps: 2 of
#          3 seeds unbeatable at their last step). End the last call with
#          `bundle "$(bash $0 best)" $OUT`: weights come back only so
#   weaklr the weak start (300 SFT steps on 200 teacher games; seeds 0 and 1, GPUs 0 and 1) with
#          RECIPE=unbeatable's RL at learning rates WEAK_LRS (default 4e-5 8e-5), WEAK_STEPS (300)
#   unsure the shipped model, rlW0's recipe with 128 greedy probes (GPUs 0 and 1), with and without
#          restarts at the probes' unsure turns (--restart-unsure UNSURE, default 0.9): the wins target
#   batch  1024 games a step instead of 256: the shipped model (rlWP's recipe, lr 1e-5 and 2e-5,
#          GPUs 0-1: wins) and the weak start (rlG at 256 and 1024 games, GPUs 2-3)
#   given  restarts whose groups also play moves given in the teacher's words (--restart-explore):
#          the shipped model (wins, GPU 0) and the weak start (GPU 1), each beside its control
#   given2 plan given with the shipped model's restarts at a random later move (run 60 steps),
#          and the weak pair from a second SFT seed
#   given3 four GPUs: the shipped model's given moves at weights 0.01, 0.025, 0.1 beside its control
#          (GPUs 0-1), and the weak start's pair from SFT seeds 1 and 2 (GPUs 2-3)
#   givenk four GPUs: the weak start from one SFT model with k = 0, 2, 4, 6 given moves per restart group
#   given4 one GPU a seed (SEEDS, SEED_GPUS): the weak start with 2 given moves per restart group, 400 steps
#   weakwins  one GPU a seed: plan given4's weak start for 300 steps, then 100 at p = 0.7 for wins
#   weakwins2 one GPU a seed: plan weakwins's first phase, then two second phases side by side from
#          it (variable PHASE1_FROM of a variant): p in [0, 0.7] in 8 buckets, and p = 0.7 alone (or
#          p in [OTHER_MIN_P, 0.7] in OTHER_BUCKETS, at OTHER_LR; both at lr 1e-5 by default; the
#          second restarting below OTHER_RESTART_BELOW, with OTHER_MISSED_WIN_PENALTY or with
#          OTHER_TURN_CREDIT, if set;
#          OTHER="": the first of them alone)
#   weakwins3 plan weakwins2 whose second phases are both the mix, at lr 1e-5 and at WINS_LR (3e-5)
#   unbeatable one run a seed: RECIPE=unbeatable as it is, RL_STEPS (300)
#   habit  one run a seed: RECIPE=unbeatable, RL_STEPS (300), from SFT on policy:teacher_centre's
#          games (the teacher less its corner habit: centre, else any free cell, on a quiet board)
#   habit2 habit with an exact evaluation every 10 steps and the best kept by fewest lost games, then
#          fewest rejected-move games, then most wins: RUN.best is the candidate to ship (`bundle` it;
#          `best` picks among RUN and RUN.best by `rlvr eval`, which can differ from the trainer's)
#   habitwins habit2 for RL_STEPS (150), then a wins phase (rlH2) of WINS_STEPS (150) at lr 1e-5
#          against p in [0, 0.7] after the random replies, whose best response is the 95.56% limit
#          policy (the recipe's own opponent, p = 0, caps wins at 94.08%)
#   limit  two runs a seed from one SFT model on policy:limit's games (the 95.56% unbeatable player
#          as the teacher): RECIPE=unbeatable as it is (rlL) and against p in [0, 0.7] in 8 buckets
#          (rlLM, whose best response is that teacher), RL_STEPS (150), evaluated every 10 steps,
#          the best kept as habit2's: what SFT on the best teacher reaches, and what each RL keeps
#          (ran 2026-12-02: SFT alone 95.30-95.51% wins, 0-4 lost games; seed 8's rlLM at step 30,
#          0 lost, 0 rejected, 95.40%, shipped; RL added no wins in 60 steps)
#   mix    one run a seed: RECIPE=unbeatable against p in [0, 0.7] (8 buckets) instead of p = 0 after
#          the random replies, whose best response caps wins at 94.08%; from each seed's SFT model
#   wins2  the shipped model, 120 steps of plan unsure's control against p in [0.35, 0.7] and in
#          [0, 0.7] (each's best response is the limit policy), side by side on one GPU, evaluated
#          every 10 steps, the best kept as habit2's
#   wins   the shipped model, 80 steps at lr 1e-5 against opponents at p = 0.7 after the random
#          replies: rlW with a KL of 0.05 to the shipped model (GPU WINS_GPU), rlW0 without (WINS_GPU2)
set -uo pipefail
ROOT=${RUNS:-runs/gpus}

wait_for() { while [ ! -f "$1" ]; do sleep 5; done; }  # a file another job writes when its stage is done

job() {  # job GPU NAME "SHARED VARS" "VARIANT VARS" ...: one seed's SFT, then its RL variants
  local gpu=$1 name=$2 shared=$3; shift 3
  local out="$ROOT/$name" first=1
  mkdir -p "$out"
  for spec in "$@"; do
    local variant=${spec%% *} vars=${spec#* }
    [ "$vars" = "$spec" ] && vars=""
    (
      export CUDA_VISIBLE_DEVICES=$gpu OUT_DIR=$out RL_NAME=$variant $shared $vars
      local rl="$variant"; [ "${RL2_STEPS:-0}" -gt 0 ] && rl="$rl ${variant}2"  # and its phase 2
      if [ -n "${PHASE1_FROM:-}" ]; then  # only a phase 2, from variant PHASE1_FROM's phase 1 (listed before it)
        wait_for "$out/$PHASE1_FROM/final/config.json"
        ln -sfn "$PHASE1_FROM" "$out/$variant"; rl="${variant}2"
      fi
      local phase keep kept=""  # and each phase's kept best (a selection; phase 2's by RL2_KEEP_BEST where set)
      for phase in $rl; do
        keep=${KEEP_BEST:-}; [ "$phase" = "${variant}2" ] && keep=${RL2_KEEP_BEST:-$keep}
        [ -n "$keep" ] && kept="$kept $phase.best"
      done
      rl="$rl$kept"
      if [ $first = 1 ]; then
        export EVAL_STAGES="${FIRST_STAGES-base sft} $rl ${LAST_STAGES-teacher}"
      else  # the later variants start from the first one's SFT model (a phase 2 alone: from its phase 1, above)
        export EVAL_STAGES="$rl"
        [ -n "${PHASE1_FROM:-}" ] || wait_for "$out/sft/final/config.json"
      fi
      bash scripts/reproduce_tictactoe.sh > "$out/pipeline-$variant.log" 2>&1
    ) &
    first=0
  done
}

four() {  # four "SHARED VARS" VARIANT...: seeds 0, 1, 2 at full scale and the weak start, one GPU each
  local shared=$1; shift
  job 0 s0 "SEED=0 $shared" "$@"
  job 1 s1 "SEED=1 $shared" "$@"
  job 2 s2 "SEED=2 $shared" "$@"
  job 3 weak "SEED=0 GAMES=200 SFT_STEPS=60 SFT_BATCH=32 $shared" "$@"
}

per_seed() {  # per_seed "SHARED VARS" VARIANT...: one job per seed (SEEDS, default 0-2), each on
  # its GPU (SEED_GPUS in the same order, default: GPU = seed; a GPU may take two seeds)
  local shared=$1; shift
  local gpus=(${SEED_GPUS:-${SEEDS-0 1 2}}) seeds=(${SEEDS-0 1 2}) i=0
  if [ ${#gpus[@]} -ne ${#seeds[@]} ]; then  # an unset GPU would run the seed on the CPU
    echo "SEED_GPUS names ${#gpus[@]} GPUs for ${#seeds[@]} seeds" >&2; exit 2
  fi
  for seed in "${seeds[@]}"; do
    job "${gpus[$i]}" "s$seed" "SEED=$seed $shared" "$@"
    i=$((i + 1))
  done
}

twins_and_weak() {  # twins_and_weak "SHARED VARS" "VARIANT VARS" A B: per seed, runs A and B of one
  # config from the same SFT model (the spread of one recipe); GPU EXTRA_GPU: the weak start with A
  # (TWIN="" leaves B out: one run per seed, e.g. three seeds and the weak start on two GPUs with
  # SEED_GPUS="0 0 1" EXTRA_GPU=1)
  local r=$1 g=$2 a=$3 b=$4 runs
  runs=("$a $g"); [ -n "${TWIN-1}" ] && runs+=("$b $g")
  export FIRST_STAGES=sft LAST_STAGES=""
  per_seed "RL_STEPS=${RL_STEPS:-350} $r" "${runs[@]}"
  if [ -n "${EXTRA_GPU-3}" ]; then
    export FIRST_STAGES="base sft"
    job "${EXTRA_GPU-3}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${WEAK_STEPS:-350} $r" "$a $g"
  fi
}

from_shipped() {  # from_shipped NAME: job NAME's RL starts from the shipped model (its "SFT model")
  mkdir -p "$ROOT/$1/sft"
  [ -d "$ROOT/$1/sft/final" ] || cp -r models/tictactoe-tiny "$ROOT/$1/sft/final"
}

start() {
  mkdir -p "$ROOT"
  export RL2_STEPS=${RL2_STEPS:-0}  # the plans ran one RL phase from SFT (reproduce_tictactoe.sh runs two)
  local plain="TRAP_PROB=0.0 OPENING_PLIES=0"  # the plans before traps and random starts
  local keep="KEEP_BEST=min:exact/beaten_games,max:exact/random/win_pct"  # fewest lost games, then most wins
  local ship="KEEP_BEST=min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct"  # and 0 rejected
  # rlS5's recipe (random replies, then p = 0, traps, half of each batch restarts of lost games),
  # the best exact evaluation kept (RUN.best, a selection): plans points and backtrack
  local restarts5="TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=2e-5 EVAL_EVERY=25 RL_MAX_P=0.0 BUCKETS=1"
  restarts5="$restarts5 RESTART_FRAC=0.5 $keep MICRO=32"
  # the weak start (200 teacher games, 300 SFT steps) with plan greedy's rlG: restarts walking
  # back, 64 greedy probes a step (plans batch, given, given2, given3, givenk, given4; add SEED)
  local weak_greedy="GAMES=200 SFT_STEPS=300 SFT_BATCH=32 $restarts5 RESTART_POINTS=backtrack RL_EXTRA=--restart-greedy=64"
  local weak_target="RL2_KEEP_BEST=exact/optimal/draw_pct>=97,max:exact/random/win_pct"  # the weak start's pair
  # plan unsure's recipe from the shipped model, for the wins target (plans unsure and batch): random
  # replies, then p = 0.7 with traps, 128 greedy probes whose lost games restart walking back
  local wins_probes="SEED=0 EVAL_EVERY=20 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_MIN_P=0.7 RL_MAX_P=0.7 BUCKETS=1 MICRO=32"
  wins_probes="$wins_probes RESTART_FRAC=0.5 RESTART_BELOW=0.5 RESTART_POINTS=backtrack RL_EXTRA=--restart-greedy=128"
  wins_probes="$wins_probes $keep"
  case $1 in
    pilot)  # one GPU: a short SFT, the env's reward vs loss_reward = -1
      job 0 s0 "SEED=0 SFT_STEPS=300 RL_STEPS=20 EVAL_EVERY=10 RL_LR=3e-5 $plain" "rl" "rlB LOSS_REWARD=-1.0" ;;
    pilot2)  # one GPU: the full SFT, four RL variants side by side
      job 0 s0 "SEED=0 RL_STEPS=${RL_STEPS:-40} EVAL_EVERY=10 $plain" \
        "lr1e5 RL_LR=1e-5" "kl RL_LR=1e-5 RL_EXTRA=--kl-coef=0.05" \
        "t07kl RL_LR=1e-5 RL_TEMP=0.7 RL_EXTRA=--kl-coef=0.05" "strong RL_LR=1e-5 RL_MAX_P=0.3 RL_EXTRA=--kl-coef=0.05" ;;
    main)  # four GPUs: three seeds of the full pipeline and the weak start, variants A and B each
      four "RL_STEPS=${RL_STEPS:-150} EVAL_EVERY=15 $plain" \
        "rl ${VARIANT_A:-RL_LR=3e-5}" "rlB ${VARIANT_B:-RL_LR=2e-5 RL_TEMP=1.25}" ;;
    trap)  # four GPUs: the main plan's two variants with a trap-setting opponent (trap_prob 1)
      export FIRST_STAGES=sft LAST_STAGES=""
      four "RL_STEPS=${RL_STEPS:-100} EVAL_EVERY=${EVAL_EVERY:-20} OPENING_PLIES=0" \
        "rlT TRAP_PROB=1.0 RL_LR=3e-5" "rlT2 TRAP_PROB=1.0 RL_LR=2e-5 RL_TEMP=1.25" ;;
    explore)  # four GPUs: traps, and training games that start from random positions (group 8 or 16)
      export FIRST_STAGES=sft LAST_STAGES=""
      four "RL_STEPS=${RL_STEPS:-80} EVAL_EVERY=${EVAL_EVERY:-20}" \
        "rlE TRAP_PROB=1.0 OPENING_PLIES=4 RL_LR=2e-5" "rlE16 TRAP_PROB=1.0 OPENING_PLIES=4 RL_LR=2e-5 GROUP=16" ;;
    history)  # two GPUs, two jobs each (four RL processes of 16-21 GB do not fit one 80 GB H100)
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="RL_STEPS=${RL_STEPS:-100} EVAL_EVERY=${EVAL_EVERY:-25} TRAP_PROB=1.0 RL_LR=2e-5"
      local h="rlH OPENING_PLIES=6 OPENING_HISTORY=true"
      job 0 s0 "SEED=0 $shared" "$h"
      job 0 s1 "SEED=1 $shared" "$h"
      job 1 s2 "SEED=2 $shared" "$h"
      job 1 weak "SEED=0 GAMES=200 SFT_STEPS=60 SFT_BATCH=32 $shared" "$h" ;;
    long)  # three GPUs: explore for longer, and explore with a lost game costing more
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="RL_STEPS=${RL_STEPS:-120} EVAL_EVERY=${EVAL_EVERY:-20} TRAP_PROB=1.0 OPENING_PLIES=4 RL_LR=2e-5"
      for seed in 0 1 2; do
        job "$seed" "s$seed" "SEED=$seed $shared" "rlE" "rlL LOSS_REWARD=-1.0"
      done ;;
    replies)  # four GPUs: random lines of replies, then an opponent that punishes mistakes
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="RL_STEPS=${RL_STEPS:-100} EVAL_EVERY=${EVAL_EVERY:-20} TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=2e-5"
      for seed in 0 1 2; do
        job "$seed" "s$seed" "SEED=$seed $shared" "rlR RL_MAX_P=0.0 BUCKETS=1" "rlR3 RL_MAX_P=0.3"
      done
      job 3 weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 $shared" "rlR RL_MAX_P=0.0 BUCKETS=1"
      from_shipped shipped
      job 3 shipped "SEED=0 $shared" "rlR RL_MAX_P=0.0 BUCKETS=1" ;;
    recipe)  # one GPU per seed (SEEDS): does the shipped model's two-phase recipe repeat?
      export FIRST_STAGES=sft LAST_STAGES=""
      for seed in ${SEEDS:-0 1 2 3}; do
        job "$seed" "s$seed" "SEED=$seed EVAL_EVERY=20 TRAP_PROB=1.0" \
          "rl RL2_STEPS=100 OPENING_PLIES=4" \
          "rlR RL_STEPS=200 RL_MAX_P=0.0 BUCKETS=1 OPENING_PLIES=0 RANDOM_REPLIES=4"
      done ;;
    weak)  # one GPU: does rlR, run longer, take the weak start to the targets? (not run yet)
      export FIRST_STAGES="base sft" LAST_STAGES=""
      job "${WEAK_GPU:-0}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${RL_STEPS:-300} EVAL_EVERY=25 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=2e-5" \
        "rlR RL_MAX_P=0.0 BUCKETS=1" ;;
    restarts)  # rlR plus restarts of lost training games, from a fresh SFT; the weak start; wins
      export FIRST_STAGES=sft LAST_STAGES=""
      local r="TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=2e-5 EVAL_EVERY=25"
      for seed in ${SEEDS-0 1 2}; do  # (SEEDS="" runs only the extra GPU's jobs)
        job "$seed" "s$seed" "SEED=$seed RL_STEPS=${RL_STEPS:-150} $r" \
          "rlS RL_MAX_P=0.0 BUCKETS=1 RESTART_FRAC=0.25" "rlS5 RL_MAX_P=0.0 BUCKETS=1 RESTART_FRAC=0.5"
      done
      if [ -n "${EXTRA_GPU-3}" ]; then
        export FIRST_STAGES="base sft"
        job "${EXTRA_GPU-3}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=200 $r" \
          "rlS RL_MAX_P=0.0 BUCKETS=1 RESTART_FRAC=0.25"
        export FIRST_STAGES=sft
        from_shipped shipped
        job "${EXTRA_GPU-3}" shipped "SEED=0 RL_STEPS=120 EVAL_EVERY=20 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=1e-5" \
          "rlWS RL_MIN_P=0.7 RL_MAX_P=0.7 BUCKETS=1 RESTART_FRAC=0.5 RESTART_BELOW=1.0"
      fi ;;
    points)  # rlS5 with every restart point of a lost game (not one drawn at random) and the best
      # evaluation kept beside the last (RUN.best, a selection); constant lr (rlP) and cosine (rlPc)
      export FIRST_STAGES=sft LAST_STAGES=""
      local r="$restarts5 RESTART_POINTS=all"
      for seed in ${SEEDS-0 1 2}; do
        job "$seed" "s$seed" "SEED=$seed RL_STEPS=${RL_STEPS:-250} $r" "rlP" "rlPc RL_EXTRA=--lr-schedule=cosine"
      done
      if [ -n "${EXTRA_GPU-3}" ]; then  # the weak start with rlP; the shipped model at T 1.5 (wins)
        export FIRST_STAGES="base sft"
        job "${EXTRA_GPU-3}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${WEAK_STEPS:-250} $r" "rlP"
        export FIRST_STAGES=sft
        from_shipped shipped
        job "${EXTRA_GPU-3}" shipped "SEED=0 RL_STEPS=120 EVAL_EVERY=20 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=1e-5 MICRO=32 $keep" \
          "rlWT RL_MIN_P=0.7 RL_MAX_P=0.7 BUCKETS=1 RL_TEMP=1.5"
      fi ;;
    backtrack)  # restarts that walk back from a lost game's last move while the whole
      # group loses again (rlK), beside plan points' rlP (every later move) from the same SFT
      export FIRST_STAGES=sft LAST_STAGES=""
      # CONTROL="" leaves rlP out
      local r="$restarts5"
      per_seed "RL_STEPS=${RL_STEPS:-300} $r" "rlK RESTART_POINTS=backtrack" ${CONTROL-"rlP RESTART_POINTS=all"}
      if [ -n "${EXTRA_GPU-3}" ]; then
        export FIRST_STAGES="base sft"
        job "${EXTRA_GPU-3}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${WEAK_STEPS:-300} $r" \
          "rlK RESTART_POINTS=backtrack"
      fi ;;
    average)  # rlK beside rlK whose evaluations, kept best and final model are the weight
      # average of about the last 50 steps (rlKe, --ema-decay 0.98), from the same SFT; GPU
      # EXTRA_GPU: the weak start, rlKe
      export FIRST_STAGES=sft LAST_STAGES=""
      local r="$restarts5 RESTART_POINTS=backtrack"
      per_seed "RL_STEPS=${RL_STEPS:-250} $r" "rlK" "rlKe RL_EXTRA=--ema-decay=0.98"
      if [ -n "${EXTRA_GPU-3}" ]; then
        export FIRST_STAGES="base sft"
        job "${EXTRA_GPU-3}" weak "SEED=0 GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${WEAK_STEPS:-250} $r" \
          "rlKe RL_EXTRA=--ema-decay=0.98"
      fi ;;
    sharpen)  # the near-ties (docs/RESULTS.md, plan average): rlK for 250 steps, then 100 more
      # at T 0.6 (rlK2), where the greedy move is sampled more often in a group; beside it a
      # second run of rlK from the same SFT model (rlJ: the spread of one recipe) and its 100
      # more steps at T 1 (rlJ2, the control); not run yet
      export FIRST_STAGES=sft LAST_STAGES=""
      local r="$restarts5 RESTART_POINTS=backtrack RL2_STEPS=${RL2_STEPS_SHARPEN:-100}"
      per_seed "RL_STEPS=${RL_STEPS:-250} $r" "rlK RL2_TEMP=0.6" "rlJ RL2_TEMP=1.0" ;;
    greedy)  # the near-ties (plan average): restarts also from greedy games, which make the
      # greedy policy's mistakes every time they reach them; two runs per SFT model
      local g="RL_EXTRA=--restart-greedy=${PROBES:-64}"
      twins_and_weak "$restarts5 RESTART_POINTS=backtrack" "$g" rlG rlGb
      if [ -n "${EXTRA_GPU-3}" ]; then
        export FIRST_STAGES=sft
        from_shipped shipped
        job "${EXTRA_GPU-3}" shipped "SEED=0 RL_STEPS=120 EVAL_EVERY=20 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_LR=1e-5 MICRO=32 $keep RESTART_FRAC=0.5 RESTART_BELOW=1.0 RESTART_POINTS=backtrack" \
          "rlWG RL_MIN_P=0.7 RL_MAX_P=0.7 BUCKETS=1 $g"
      fi ;;
    cover)  # plan greedy, its probes meeting the deep random lines its lost games came from
      twins_and_weak "$restarts5 RESTART_POINTS=backtrack PROBE_REPLIES=${PROBE_REPLIES:-4} PROBE_SHARE=${PROBE_SHARE:-0.5}" \
        "RL_EXTRA=--restart-greedy=${PROBES:-128}" rlC rlCb ;;
    weaklr)  # the weak start at higher learning rates: RECIPE=unbeatable's RL (plan cover with
      # restarts below 0.65) at each lr of WEAK_LRS (default 4e-5 8e-5; the plans before ran 2e-5),
      # from two weak SFT models (seeds 0 and 1 of 200 teacher games, GPUs 0 and 1), WEAK_STEPS each
      export FIRST_STAGES="base sft" LAST_STAGES=""
      local r="$restarts5 RESTART_POINTS=backtrack RESTART_BELOW=0.65 PROBE_REPLIES=4 PROBE_SHARE=0.5"
      local runs=() lr
      for lr in ${WEAK_LRS:-4e-5 8e-5}; do runs+=("rlC${lr%e-5} RL_LR=$lr RL_EXTRA=--restart-greedy=128"); done
      for seed in 0 1; do
        job "$seed" "weak$seed" "SEED=$seed GAMES=200 SFT_STEPS=300 SFT_BATCH=32 RL_STEPS=${WEAK_STEPS:-300} $r" "${runs[@]}"
      done ;;
    unsure)  # the wins target: the shipped model with rlW0's recipe (random replies, then p = 0.7,
      # lr 1e-5) plus 128 greedy probes whose lost games are restarted (walking back), 120 steps;
      # rlWU also restarts the probes' turns whose reply had a probability below UNSURE (default
      # 0.9; --restart-unsure) on GPU 0, rlWP without on GPU 1 (the control); run 2026-11-28:
      # no gain (docs/RESULTS.md)
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="$wins_probes RL_STEPS=${RL_STEPS:-120} RL_LR=1e-5"
      from_shipped shipped; from_shipped shipped0
      job 0 shipped "$shared" "rlWU RESTART_UNSURE=${UNSURE:-0.9}"
      job 1 shipped0 "$shared" "rlWP" ;;
    batch)  # four games a step for one: the same minutes, more visits to rare decisions (a step of
      # 256 games leaves the GPU mostly idle). GPUs 0 and 1: plan unsure's control (rlWP) from
      # the shipped model with BATCH=1024 at lr 1e-5 (rlWB) and 2e-5 (rlWB2), 100 steps (the
      # wins target); GPUs 2 and 3: the weak start with plan greedy's rlG at 256 games a step
      # (rlG, WEAK_STEPS) and 1024 at lr 2e-5 (rlGB, WEAK_BIG_STEPS), each from its own SFT
      # (pass SFT_EXTRA=--deterministic for one SFT model twice)
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="$wins_probes RL_STEPS=${RL_STEPS:-100} BATCH=1024"
      from_shipped shipped; from_shipped shipped2
      job 0 shipped "$shared" "rlWB RL_LR=1e-5"
      job 1 shipped2 "$shared" "rlWB2 RL_LR=2e-5"
      export FIRST_STAGES="base sft"
      local weak="SEED=0 $weak_greedy"
      job 2 weak "$weak RL_STEPS=${WEAK_STEPS:-300}" "rlG"
      job 3 weakB "$weak RL_STEPS=${WEAK_BIG_STEPS:-250} BATCH=1024" "rlGB" ;;
    given)  # restarts whose groups also play moves the policy almost never samples
      # (--restart-explore EXPLORE, default 2 of each group of 8: moves the teacher might make
      # there, in its words), each beside its control from the same start, sharing a GPU.
      # GPU 0: the shipped model, plan unsure's control recipe restarting every game not won
      # (RESTART_BELOW=1.0: the give-ups are draws), rlWX vs rlWN, RL_STEPS (120); GPU 1: the
      # weak start, rlG vs rlGX, WEAK_STEPS (250). Run 2026-11-29 (docs/RESULTS.md): the weak start
      # gained beside its control, the shipped model's wins did not
      export FIRST_STAGES=sft LAST_STAGES=""
      from_shipped shipped
      job 0 shipped "$wins_probes RL_STEPS=${RL_STEPS:-120} RL_LR=1e-5 RESTART_BELOW=1.0" \
        "rlWX RESTART_EXPLORE=${EXPLORE:-2}" "rlWN"
      export FIRST_STAGES="base sft"
      job 1 weak "SEED=0 $weak_greedy RL_STEPS=${WEAK_STEPS:-250}" \
        "rlGX RESTART_EXPLORE=${EXPLORE:-2}" "rlG" ;;
    given2)  # plan given again where its restarts reach the give-ups (run only 60 steps of GPU 0,
      # 2026-11-29: k = 2 lost 12 and 14 games at steps 20 and 40, k = 0 2 and 2): GPU 0, the
      # shipped model restarting games not won at one later move drawn at random
      # (RESTART_POINTS=random; plan given walked back from the last move, and 13.8 of 15.9
      # restarts a step sat in drawn endgames), rlWXr (k = EXPLORE) vs rlWNr, RL_STEPS (120);
      # GPU 1: the weak start's pair again from a second SFT seed (WEAK_SEED, default 1);
      # EXPLORE_WEIGHT (--restart-explore-weight, default 1.0) for the shipped model's given moves
      export FIRST_STAGES=sft LAST_STAGES=""
      from_shipped shipped
      job 0 shipped "$wins_probes RL_STEPS=${RL_STEPS:-120} RL_LR=1e-5 RESTART_BELOW=1.0 RESTART_POINTS=random" \
        "rlWXr RESTART_EXPLORE=${EXPLORE:-2} RESTART_EXPLORE_WEIGHT=${EXPLORE_WEIGHT:-1.0}" "rlWNr"
      export FIRST_STAGES="base sft"
      job 1 "weak${WEAK_SEED:-1}" "SEED=${WEAK_SEED:-1} $weak_greedy RL_STEPS=${WEAK_STEPS:-250}" \
        "rlGX RESTART_EXPLORE=${EXPLORE:-2}" "rlG" ;;
    given3)  # four GPUs: plan given2 with the given moves' advantage weighed down
      # (--restart-explore-weight: their gradients were ~470x a sampled reply's at the restart
      # points, scripts/tictactoe_given.py grads, so at weight 1 they set each clipped step).
      # GPU 0: the shipped model, rlWXa (weight 0.025) beside rlWNr; GPU 1: rlWXb (0.1) beside
      # rlWXc (0.01), RL_STEPS (120); GPUs 2 and 3: the weak start's pair (weight 1) from SFT
      # seeds 1 and 2, WEAK_STEPS (250)
      export FIRST_STAGES=sft LAST_STAGES=""
      local given="$wins_probes RL_STEPS=${RL_STEPS:-120} RL_LR=1e-5 RESTART_BELOW=1.0 RESTART_POINTS=random"
      from_shipped shipped; from_shipped shipped_w
      job 0 shipped "$given" "rlWXa RESTART_EXPLORE=2 RESTART_EXPLORE_WEIGHT=0.025" "rlWNr"
      job 1 shipped_w "$given" "rlWXb RESTART_EXPLORE=2 RESTART_EXPLORE_WEIGHT=0.1" \
        "rlWXc RESTART_EXPLORE=2 RESTART_EXPLORE_WEIGHT=0.01"
      export FIRST_STAGES="base sft"
      for seed in 1 2; do
        job $((seed + 1)) "weak$seed" "SEED=$seed $weak_greedy RL_STEPS=${WEAK_STEPS:-250}" \
          "rlGX RESTART_EXPLORE=2" "rlG"
      done ;;
    givenk)  # four GPUs, one run each: the weak start's rlG from one SFT model (SFT seed WEAK_SEED,
      # default 0; SFT_EXTRA=--deterministic makes the four SFT runs one model) with 0, 2, 4 and 6
      # of each restart group's 8 rollouts given the teacher's moves (weight 1), WEAK_STEPS (125):
      # how the weak start's gain (plans given, given3) depends on k
      export FIRST_STAGES="base sft" LAST_STAGES=""
      local k
      for k in 0 2 4 6; do
        job $((k / 2)) "weak_k$k" "SEED=${WEAK_SEED:-0} $weak_greedy RL_STEPS=${WEAK_STEPS:-125}" \
          "rlGk$k RESTART_EXPLORE=$([ $k -gt 0 ] && echo $k)"
      done ;;
    given4)  # the weak start's best recipe so far for longer, one run a GPU: plan given's rlGX (k =
      # 2 given moves, weight 1) from SFT seeds SEEDS (0-2) on SEED_GPUS, WEAK_STEPS (400; their
      # draws vs optimal were still rising at step 250 of plans given and given3), the best exact
      # evaluation kept too; about 22 device minutes in three calls. Run 2026-11-29 on 2 GPUs with
      # SEEDS="1 2" SEED_GPUS="0 1" (docs/RESULTS.md)
      export FIRST_STAGES="base sft" LAST_STAGES=""
      per_seed "$weak_greedy RL_STEPS=${WEAK_STEPS:-400}" "rlGX RESTART_EXPLORE=2" ;;
    weakwins)  # for the weak start's wins target (>= 90% vs random; plan given4 ended at 82.7-87.1%,
      # the minimax teacher's 87.26%, since its opponent plays perfectly after its random replies):
      # plan given4's rlGX for WEAK_STEPS (300), then a second phase (rlGX2) of WINS_STEPS (100) at
      # lr 1e-5 against p = 0.7 (the shipped model's wins phase), restarts and given moves on in
      # both; one seed a GPU (SEEDS, SEED_GPUS). At p = 0.7 alone the second phase traded draws vs
      # optimal for wins (97.49 -> 95.60%, 82.55 -> 88.09%): after the random replies, p = 0.7's best
      # response loses 22% to a perfect player (scripts/tictactoe_best_response.py). WINS_MIN_P=0
      # WINS_BUCKETS=8 (p in [0, 0.7], whose best response is the 95.56% limit policy) keeps them
      export FIRST_STAGES="base sft" LAST_STAGES=""
      per_seed "$weak_greedy RL_STEPS=${WEAK_STEPS:-300} RL2_STEPS=${WINS_STEPS:-100} RL2_MIN_P=${WINS_MIN_P:-0.7} RL2_MAX_P=0.7 RL2_BUCKETS=${WINS_BUCKETS:-1} RL2_LR=1e-5" \
        "rlGX RESTART_EXPLORE=2" ;;
    weakwins2|weakwins3)  # plan weakwins's two second phases side by side from one first phase
      # (one GPU a seed): rlGX2 against p in [0, 0.7] in eight buckets (perfect opponents in every
      # batch), lr 1e-5; rlGY2 against p = 0.7 alone (plan weakwins's second phase, the control), or
      # against p in [OTHER_MIN_P, 0.7] in OTHER_BUCKETS (e.g. 0.35 and 8: a safe optimum with 91% of
      # p = 0.7's pull towards the moves that win more, docs/RESULTS.md "The training opponents' best
      # responses"), at OTHER_LR. weakwins3 asks whether a larger learning rate speeds the mixed
      # phase (weakwins2's gained +2.1 points of wins in 100 steps, 3.84 short of 90%): rlGY2 is the
      # same mix at WINS_LR (3e-5), 120 steps each. Run 2026-12-02 on one H200, seed 3
      # (docs/RESULTS.md): 3e-5 did worse (83.50% wins, 30 lost; 1e-5 85.54%, 19)
      if [ "$1" = weakwins3 ]; then
        : "${OTHER_MIN_P:=0}" "${OTHER_BUCKETS:=8}" "${OTHER_LR:=${WINS_LR:-3e-5}}" "${WINS_STEPS:=120}"
      fi
      # OTHER_RESTART_BELOW=0.9: rlGY2 also restarts clean draws (0.7; a win scores 1.2), where the
      # weak start leaves most of its wins, a win on the board not taken (plan weakwins2 from the
      # limit player's games, docs/RESULTS.md); OTHER_MIN_P=0 OTHER_BUCKETS=8 OTHER_RESTART_BELOW=0.9
      # puts it beside rlGX2 as its control. Run 2026-12-03 on one H200, seed 4, WEAK_STEPS=250: worse
      # (66 lost games, 83.88% wins; the control 48, 85.82%): drawn games filled the restart pool.
      # 17.6 GPU-minutes for the seed with both mixed phases side by side. OTHER_MISSED_WIN_PENALTY
      # (e.g. 0.3): rlGY2 trains with the env's missed_win_penalty, a game that leaves a win on the
      # board costs that much. Run 2026-12-03 at 0.3 from seed 4's first phase at step 125 (its
      # best; carried in, bf16): missed wins a game in training 0.123 against the control's 0.128
      # over steps 51-100, the term moved nothing it aims at. OTHER_TURN_CREDIT (e.g. 1): rlGY2
      # trains with --turn-credit, the env's turn score (-1 a turn that leaves a win on the board)
      # on that turn's advantage alone instead of the whole game's. Run 2026-12-03 at 0.5, seed 2,
      # 250 + 50 steps (cut there): missed wins in training 0.075 a game against the control's 0.107,
      # 88.75% wins with 98.28% draws (control 88.49%, 97.55%). Continued from the control's step 50
      # (restored, 2026-12-03): 100 steps, then 75 more from the credit arm's end, 90.15% wins with
      # 98.17% draws (its control 89.72%, 99.07%). From the credit arm's step 400 again (forty-first
      # session), 100 steps: both arms met the pair (rlGX2 90.15% wins, 99.21% draws in bf16 on a
      # CPU, its weights bundled); WEAK_STEPS=150 from a fresh, weaker SFT run: 85.83% / 93.47%
      # with credit at mixed step 100 (without 81.15% / 94.14%), about 17.7 GPU-minutes to there.
      # MIX_TURN_CREDIT (e.g. 0.5): rlGX2 trains with turn scores too (its first phase without); with
      # OTHER="", the one run a seed is the line that met the pair, credit in its whole mixed phase:
      # OTHER="" MIX_TURN_CREDIT=0.5 SEEDS="2 3 4" SEED_GPUS="0 0 0": three a GPU, run 2026-12-04 on one
      # H200: base, SFT and the 250-step first phases in 17.5 minutes (3.7-3.9 s a step with their
      # evaluations), the mixed phases 3.6-4.0 s a step; about 12 GPU-minutes a seed for the line.
      # OTHER="" leaves rlGY out: rlGX alone a seed, e.g. two seeds a GPU (SEED_GPUS="0 0"; with
      # TEACHER=limit, WEAK_STEPS=250, seeds 2 and 3, run 2026-12-02: 4.1-4.3 s a step side by side,
      # too slow for one session's device time; seed 2 alone reached 86.98% wins, 93.12% draws)
      # The second phases keep the model of the most wins among evaluations with >= 97% draws vs
      # optimal (the weak start's target pair; a selection by the exact evaluation, reported as such).
      # `best` (so `wait`'s BUNDLE=1 too) answers by that order: the model this plan is after.
      export FIRST_STAGES="base sft" LAST_STAGES=""
      echo "${weak_target#RL2_KEEP_BEST=}" > "$ROOT/best_by"
      local runs=("rlGX RL2_MIN_P=0 RL2_BUCKETS=8 RL2_LR=1e-5${MIX_TURN_CREDIT:+ RL2_TURN_CREDIT=$MIX_TURN_CREDIT}")
      [ -n "${OTHER-1}" ] && runs+=(
        "rlGY PHASE1_FROM=rlGX RL2_MIN_P=${OTHER_MIN_P:-0.7} RL2_BUCKETS=${OTHER_BUCKETS:-1} RL2_LR=${OTHER_LR:-1e-5}${OTHER_RESTART_BELOW:+ RL2_RESTART_BELOW=$OTHER_RESTART_BELOW}${OTHER_MISSED_WIN_PENALTY:+ MISSED_WIN_PENALTY=$OTHER_MISSED_WIN_PENALTY}${OTHER_TURN_CREDIT:+ TURN_CREDIT=$OTHER_TURN_CREDIT}")
      per_seed "$weak_greedy RL_STEPS=${WEAK_STEPS:-300} RL2_STEPS=${WINS_STEPS:-100} RL2_MAX_P=0.7 RESTART_EXPLORE=2 $weak_target" \
        "${runs[@]}" ;;
    unbeatable|mix|habit|habit2|habitwins|limit)  # RECIPE=unbeatable, one run a seed from a new SFT model each (SEEDS, SEED_GPUS:
      # "0 0 0" puts three on one GPU). unbeatable: as it is, RL_STEPS (300), a repeat of the 2-of-3
      # result (twelfth session, two seeds a GPU) and its GPU-minutes a seed at three a GPU. mix:
      # against p in [0, 0.7] in 8 buckets after the random replies (perfect opponents in every
      # batch), whose best response is the 95.56% limit policy, where the recipe's own opponent (p =
      # 0) caps wins vs random at 94.08%, below the 95% target (scripts/tictactoe_best_response.py),
      # RL_STEPS (200). mix ran 2026-12-02 on one H200 (docs/RESULTS.md): no more wins than at p = 0,
      # and more lost games (5/5/3 against 0/5/0). habit: as it is, 300 steps, from SFT on the games
      # of policy:teacher_centre (the teacher less its corner habit): 76-95% of the wins the recipe's
      # models give up are the centre-then-corner habit played where only an edge is better
      # (tictactoe_regret.py --by-kind), an edge the teacher plays 5% of the time there. habit ran
      # 2026-12-02 for 150 steps on seeds 3 and 4 (RL_STEPS=150, two on one H200): both unbeatable
      # at step 150 with 93.66% and 92.36% wins vs random, and 3 and 1 games with a rejected move,
      # which the shipped model must not have; habit2 keeps the best by them too, evaluating every
      # 10 steps for more candidates (lost-game counts swing between evaluations); ran 2026-12-02 on
      # seeds 5-7 for 150 steps: 1 of 3 unbeatable (90.50% wins), RL put the corner habit back on
      # two (docs/RESULTS.md). habitwins: habit2
      # for 150 steps, then 150 against p in [0, 0.7] (rlH2), from 92.36-93.66% towards the 95.56%
      # the recipe's own opponent cannot lead to (its best response wins 94.08%). limit: SFT on the
      # limit player's games (every quiet move one of the best; plan habit2 showed RL putting the
      # corner habit back where the teacher never plays it), then the recipe as it is beside the
      # recipe against [0, 0.7], whose best response is the teacher itself
      export FIRST_STAGES=sft LAST_STAGES=""
      local centre="TEACHER=teacher_centre" shipping="TEACHER=teacher_centre EVAL_EVERY=10 $ship"
      case $1 in
        unbeatable) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-300} $keep" "rlU" ;;
        mix) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-200} RL_MAX_P=0.7 BUCKETS=8 $keep" "rlM" ;;
        habit) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-300} $centre $keep" "rlH" ;;
        habit2) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-300} $shipping" "rlH" ;;
        limit) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-150} TEACHER=limit EVAL_EVERY=10 $ship" \
          "rlL" "rlLM RL_MAX_P=0.7 BUCKETS=8" ;;
        habitwins) per_seed "RECIPE=unbeatable RL_STEPS=${RL_STEPS:-150} $shipping RL2_STEPS=${WINS_STEPS:-150} RL2_MAX_P=0.7 RL2_BUCKETS=8 RL2_LR=1e-5" "rlH" ;;
      esac ;;
    wins2)  # the shipped model's wins phase against opponents whose best response is the unbeatable
      # 95.56% limit policy (scripts/tictactoe_best_response.py; p = 0.7 after the replies has a beatable
      # one): plan unsure's control (rlWP: random replies, 128 greedy probes restarted walking back,
      # lr 1e-5), 120 steps, p in [0.35, 0.7] (rlWM) and in [0, 0.7] (rlWM0), eight buckets, side by
      # side on GPU WINS_GPU (default 0), evaluated every 10 steps, the best kept by the shipping rule
      # ($ship overrides $wins_probes's $keep, as later settings do). Ran 2026-12-02 for 100 steps:
      # no wins gained (92.37 -> 92.32 and 92.10%), each run's best the start
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="$wins_probes RL_STEPS=${RL_STEPS:-120} RL_LR=1e-5 RL_MAX_P=0.7 BUCKETS=8 EVAL_EVERY=10 $ship"
      from_shipped shipped
      job "${WINS_GPU:-0}" shipped "$shared" "rlWM RL_MIN_P=0.35" "rlWM0 RL_MIN_P=0" ;;
    wins)  # the shipped model against opponents at p = 0.7 after random replies (taken for the 95.56%
      # limit policy's opponent; computed since, its best response loses 22%: scripts/tictactoe_best_response.py):
      # rlW near it by a KL (GPU WINS_GPU), rlW0 without (GPU WINS_GPU2)
      export FIRST_STAGES=sft LAST_STAGES=""
      local shared="SEED=0 RL_STEPS=${RL_STEPS:-80} EVAL_EVERY=20 TRAP_PROB=1.0 OPENING_PLIES=0 RANDOM_REPLIES=4 RL_MIN_P=0.7 RL_MAX_P=0.7 BUCKETS=1 RL_LR=1e-5"
      from_shipped shipped; from_shipped shipped0
      job "${WINS_GPU:-0}" shipped "$shared" "rlW RL_EXTRA=--kl-coef=0.05"
      job "${WINS_GPU2:-${WINS_GPU:-0}}" shipped0 "$shared" "rlW0" ;;
    *) echo "unknown plan $1" >&2; exit 2 ;;
  esac
  touch "$ROOT.launched"  # for `start`: every job of the plan is under way
  wait
}

SEND_LIMIT=$(( 64 * 1024 * 1024 - 1024 * 1024 ))  # $OUT's files together, 1 MiB to spare (a runs.tgz collected after)

unsent() {  # unsent NAME: RUNS/packed/NAME has parts not sent since they were packed (parts newer than
  # its `sent` mark; equal times, one clock tick apart, count as sent)
  [ -f "$ROOT/packed/$1/model.tar.00" ] && { [ ! -f "$ROOT/packed/$1/sent" ] || [ "$ROOT/packed/$1/model.tar.00" -nt "$ROOT/packed/$1/sent" ]; }
}

send_one() {  # send_one DIR NAME: RUNS/packed/NAME's parts into DIR/NAME, marked sent; 1 when DIR would
  # pass SEND_LIMIT with them (nothing copied). A DIR/NAME there before (a call whose files did not
  # come back, or a copy killed midway) is replaced whole
  rm -rf "${1:?}/$2"
  local used size
  used=$(du -sb "$1" | cut -f1); size=$(du -cb "$ROOT/packed/$2"/model.tar.* | tail -1 | cut -f1)
  [ $(( used + size )) -le "$SEND_LIMIT" ] || return 1
  mkdir "$1/$2" && cp "$ROOT/packed/$2"/model.tar.* "$1/$2/" && touch "$ROOT/packed/$2/sent" \
    && echo "sent $2 -> $1/$2" || exit 1
}

collect() {  # collect DIR [noplots]: tables, metrics, logs, exact summaries (no weights) -> DIR/runs.tgz;
  # noplots leaves out the PNGs (89% of the 7.7 MB of three 200-step runs; `rlvr report RUN`
  # draws the curves from metrics.csv): what `wait` collects, so that a call's reply comes back
  # fast and the next call reaches the machine within its 30 s idle release. With them, every
  # finished stage evaluation's games (OUT/eval/STAGE-exact/results.jsonl, ~0.3 MB a stage
  # compressed): scripts/tictactoe_regret.py reads a model's policy from them here, no weights needed
  mkdir -p "$1"
  local png=(-o -name "*.png"); [ "${2:-}" = noplots ] && png=()
  {  # (each list ends true: under pipefail a grep that matches nothing would stop the archive)
    find -L "$ROOT" \( -name "*.csv" -o -name "*.md" -o -name "*.log" -o -name "*.seconds" "${png[@]}" \
      -o -name "metadata.json" -o -name "config.json" \) -not -path "*/checkpoints/*" -not -path "*/final/*" || true
    find -L "$ROOT" -path "*/eval/*-exact/metadata.json" | while IFS= read -r meta; do  # games of finished evaluations
      if grep -q '"status": "complete"' "$meta" && [ -f "${meta%metadata.json}results.jsonl" ]; then
        echo "${meta%metadata.json}results.jsonl"  # (one still being written would fail the archive)
      fi
    done || true
  } | tar czf "$1/runs.tgz.part" -T - && mv "$1/runs.tgz.part" "$1/runs.tgz"  # (a call cut mid-write keeps the last whole one)
}

case ${1:-} in
  start)
    mkdir -p "$(dirname "$ROOT")"; rm -f "$ROOT.launched"
    setsid -w bash "$0" _start "$2" > "$ROOT.log" 2>&1 < /dev/null &  # -w: $! lives as long as the plan
    launcher=$!
    while [ ! -f "$ROOT.launched" ] && kill -0 "$launcher" 2>/dev/null; do sleep 0.2; done
    if [ ! -f "$ROOT.launched" ]; then  # over before its jobs started: refused (a bad plan or SEED_GPUS)
      wait "$launcher"; rc=$?
      cat "$ROOT.log" >&2; exit $(( rc ? rc : 1 ))
    fi
    echo "started plan $2 (log $ROOT.log)" ;;
  _start) mkdir -p "$ROOT"; echo $$ > "$ROOT.pid"; trap 'rm -f "$ROOT.pid"' EXIT; start "$2"; echo "plan $2 finished" ;;
  wait)
    end=$(( $(date +%s) + $2 ))
    while [ -f "$ROOT.pid" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
    for f in "$ROOT"/*/pipeline-*.log; do echo "--- $f"; grep -E "^== |step [0-9]+/|exact W/D/L|unbeatable|Error|error" "$f" | tail -6; done
    bash "$0" summary  # the pipelines run quietly, so their logs hold no steps: each run's from its metrics
    if [ -n "${3:-}" ]; then
      collect "$3" noplots
      if [ -n "${BUNDLE:-}" ]; then  # and the best model so far: a machine released before the next call keeps it
        best=$(bash "$0" best)
        if [ -n "$best" ]; then bash "$0" bundle "$best" "$3"; else echo "no RL model evaluated yet: nothing bundled"; fi
      fi
      if [ -n "${BUNDLE_FROM:-}" ]; then  # and first phases' final models, where second phases start
        # (SEED/RUN: RUN/final), or any model folder under RUNS (e.g. SEED/RUN/best, a kept best):
        # each packed into RUNS/packed/NAME (again when it changed) and sent, the never sent first,
        # until the call's files are full; the rest are not packed (a pack takes 10-15 s of the call)
        read -r -d '' -a keys <<< "$BUNDLE_FROM" || true  # (split on blanks and newlines, never globbed)
        first=(); again=(); left=(); full=; seen=0  # seen: the largest pack sent in this call
        for key in "${keys[@]}"; do
          if [ -f "$ROOT/packed/${key//\//-}/sent" ]; then again+=("$key"); else first+=("$key"); fi
        done
        for key in ${first[@]+"${first[@]}"} ${again[@]+"${again[@]}"}; do
          name=${key//\//-} model=$ROOT/$key/final
          [ -f "$model/config.json" ] || model=$ROOT/$key
          part=$ROOT/packed/$name/model.tar.00
          if [ ! -f "$model/config.json" ]; then echo "no model at $ROOT/$key(/final) yet: not bundled"; continue; fi
          stale=; [ -f "$part" ] && [ -z "$(find -L "$model" -newer "$part" -print -quit)" ] || stale=1
          [ -n "$stale" ] || unsent "$name" || continue  # packed since it last changed, and sent since
          if [ -n "$stale" ] && [ $(( $(du -sb "$3" | cut -f1) + seen )) -gt "$SEND_LIMIT" ]; then
            full=1  # (no room for one more of the size just sent: not packed in vain)
          fi
          if [ -n "$full" ]; then left+=("$name"); continue; fi
          if [ -n "$stale" ]; then
            bash "$0" pack "$ROOT/packed/$name" "$name=$model" || { echo "$name: not packed (a model being rewritten?)"; continue; }
          fi
          if send_one "$3" "$name"; then
            size=$(du -sb "$3/$name" | cut -f1); [ "$size" -le "$seen" ] || seen=$size
          else left+=("$name"); full=1; fi
        done
        [ ${#left[@]} -eq 0 ] || echo "not sent (over 64 MiB with this call's files): ${left[*]}; the next call's wait packs and sends them"
      fi
    fi ;;
  send)  # send DIR [NAME...]: packed models into DIR/NAME, by default those not sent since they were
    # last packed (its parts newer than RUNS/packed/NAME/sent), the never sent first (a kept best
    # packed again each call starves no other), while DIR's files stay within $OUT's 64 MiB a call
    # (a call whose files did not come back: name it again)
    dir=${2:-}; [ -n "$dir" ] && shift 2 || { echo "send DIR [NAME...]: no DIR" >&2; exit 2; }
    names=("$@")
    if [ ${#names[@]} -eq 0 ]; then
      again=()
      for d in "$ROOT"/packed/*; do
        if ! unsent "${d##*/}"; then continue
        elif [ -f "$d/sent" ]; then again+=("${d##*/}")
        else names+=("${d##*/}"); fi
      done
      names+=(${again[@]+"${again[@]}"})
    fi
    mkdir -p "$dir"; left=()
    for name in ${names[@]+"${names[@]}"}; do
      [[ $name =~ ^[A-Za-z0-9_][A-Za-z0-9._-]*$ ]] && [ -f "$ROOT/packed/$name/model.tar.00" ] \
        || { echo "send: no packed model '$name' in $ROOT/packed" >&2; exit 2; }
      send_one "$dir" "$name" || left+=("$name")
    done
    [ ${#left[@]} -eq 0 ] || echo "not sent (over 64 MiB with this call's files): ${left[*]}; next call: send DIR ${left[*]}" ;;
  collect) collect "$2" "${3:-}" ;;
  summary)  # every exact table of the plan's stages, the kept bests, and each run's exact curve
    python3 - "$ROOT" <<'EOF'
import csv, json, sys
from pathlib import Path
root = Path(sys.argv[1])
for meta in sorted(root.glob("*/eval/*-exact/metadata.json")):
    exact = json.loads(meta.read_text()).get("exact")
    name = f"{meta.parents[2].name}/{meta.parent.name.removesuffix('-exact')}"
    if not exact:
        print(f"{name}: incomplete")
        continue
    r = exact["rates_pct"]
    print(f"{name}: lost {len(exact['beaten'])}/{exact['games']}, rejected {exact.get('rejected_move_games')}, "
          f"vs random W {r['random'].get('win', 0):.2f}, vs optimal D {r['optimal'].get('draw', 0):.2f}")
for kept in sorted(root.glob("*/*/best/keep_best.json")):
    print(f"{kept.parent.parent.relative_to(root)} kept: {kept.read_text().strip()}")
def number(row, key):
    try:
        return int(float(row.get(key) or ""))
    except ValueError:  # empty, or a line still being written
        return None
for metrics in sorted(root.glob("*/*/metrics.csv")):
    rows = [x for x in csv.DictReader(metrics.open()) if number(x, "step") is not None]
    curve = ", ".join(f"{number(x, 'step')}:{n}" for x in rows if (n := number(x, "exact/beaten_games")) is not None)
    at = f"step {number(rows[-1], 'step')}" if rows else "no step yet"
    print(f"{metrics.parent.relative_to(root)} at {at}; lost games by step: {curve}")
EOF
    ;;
  best)  # by BEST_BY, a keep_best order (min:METRIC, max:METRIC, METRIC>=X, METRIC<=X; the
    # plan's own where `start` wrote one, RUNS/best_by; else fewest lost games over the whole tree,
    # then fewest with a rejected move, then the highest exact win rate vs random); a restored
    # first phase (`restore`: this machine's input, not its work) is never the answer
    spec=${BEST_BY:-$(cat "$ROOT/best_by" 2> /dev/null)}
    python3 - "$ROOT" "${spec:-min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct}" <<'EOF'
import json, math, re, sys
from pathlib import Path

order = []  # (how, metric, bound), as rlvr.train.best.parse reads it: importing rlvr needs numpy, a bare python3 lacks it
for entry in sys.argv[2].split(","):
    m = re.fullmatch(r"\s*(?:(min|max):(\S+)|(\S+?)(>=|<=)([-+0-9.eE]+))\s*", entry)
    try:
        order.append((m[1], m[2], 0.0) if m[1] else (m[4], m[3], float(m[5])))
    except (TypeError, ValueError):
        sys.exit(f"best: BEST_BY {sys.argv[2]!r}: each entry is min:METRIC, max:METRIC, METRIC>=X or METRIC<=X")

def read(path):  # a JSON object, or {} for a file torn, still being written or foreign (said on stderr)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        print(f"best: {path} is not a JSON object; passed over", file=sys.stderr)
        return {}
    return data

def number(value):  # a count or rate; missing, unreadable or NaN: None (ranks worst)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value

def rank(metrics):  # lower is better; a floor or ceiling: 0 met, 1 missed (or unknown)
    key = []
    for how, name, bound in order:
        value = number(metrics.get(name))
        if how in ("min", "max"):
            key.append(math.inf if value is None else value if how == "min" else -value)
        else:
            key.append(0 if value is not None and (value >= bound if how == ">=" else value <= bound) else 1)
    return tuple(key)

def exact_metrics(exact):  # an exact evaluation's metadata as the trainer names its metrics
    beaten, rates = exact.get("beaten"), exact.get("rates_pct")
    out = {"exact/beaten_games": len(beaten) if isinstance(beaten, list) else None,
           "exact/rejected_move_games": exact.get("rejected_move_games")}
    for opponent, outcomes in (rates.items() if isinstance(rates, dict) else ()):
        for outcome, pct in (outcomes.items() if isinstance(outcomes, dict) else ()):
            out[f"exact/{opponent}/{outcome}_pct"] = pct
    return out

found = {}  # model folder -> rank: by the pipeline's exact evaluation, else (still running) its kept-best record
for meta in Path(sys.argv[1]).glob("*/eval/*-exact/metadata.json"):
    stage = meta.parent.name.removesuffix("-exact")
    run = meta.parents[2] / stage.removesuffix(".best") / ("best" if stage.endswith(".best") else "final")
    exact = read(meta).get("exact")
    if (isinstance(exact, dict) and (run / "config.json").exists() and stage not in ("sft", "base", "teacher")
            and not (run.parent / "restored_from").exists()):
        found[run] = rank(exact_metrics(exact))
for kept in Path(sys.argv[1]).glob("*/*/best/keep_best.json"):
    metrics = read(kept).get("metrics")  # (the metrics its KEEP_BEST names: others rank worst)
    if kept.parent not in found and isinstance(metrics, dict) and (kept.parent / "config.json").exists():
        found[kept.parent] = rank(metrics)
print(min(found, key=lambda run: (found[run], str(run))) if found else "")
EOF
    ;;
  ship)
    python3 - "$2" "$3" <<'EOF'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, dst = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(torch.bfloat16)
model.save_pretrained(dst, max_shard_size="15MB")
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
print(f"shipped {src} -> {dst} (bfloat16)")
EOF
    ;;
  bundle)  # bundle MODEL DIR: one model, the archive's folder `model`
    [ -f "${2:-}/config.json" ] && [ -n "${3:-}" ] || { echo "bundle MODEL DIR: no model folder at '${2:-}'" >&2; exit 2; }
    bash "$0" pack "$3" "model=$2" ;;
  pack)  # pack DIR NAME=MODEL...: each model shipped into the folder NAME of one tar, split into
    # DIR/model.tar.NN. The parts are written beside DIR's, then swapped in (rm, mv): a kill while
    # they are written keeps the last whole set (and its half-written folder is removed, here or by
    # the next pack: in $OUT it would come back as files); only a kill inside the swap leaves none
    dir=${2:-}; shift 2 || { echo "pack DIR NAME=MODEL...: no DIR" >&2; exit 2; }
    names=()
    for pair in "$@"; do
      [ "${pair%%=*}" != "$pair" ] && [ -f "${pair#*=}/config.json" ] \
        || { echo "pack DIR NAME=MODEL...: no model folder in '$pair'" >&2; exit 2; }
      [[ ${pair%%=*} =~ ^[A-Za-z0-9_][A-Za-z0-9._-]*$ ]] \
        || { echo "pack DIR NAME=MODEL...: NAME '${pair%%=*}' is not a plain folder name" >&2; exit 2; }
      names+=("${pair%%=*}")
    done
    [ ${#names[@]} -gt 0 ] || { echo "pack DIR NAME=MODEL...: no model named" >&2; exit 2; }
    mkdir -p "$dir" && rm -rf "$dir"/.bundle.* && tmp=$(mktemp -d "$dir/.bundle.XXXXXX") || exit 1
    trap 'rm -rf "$tmp"' EXIT; trap 'exit 143' TERM INT
    for pair in "$@"; do bash "$0" ship "${pair#*=}" "$tmp/${pair%%=*}" || exit 1; done
    tar cf - -C "$tmp" "${names[@]}" | split -b 15M -d - "$tmp/model.tar." \
      && rm -f "$dir"/model.tar.* && mv "$tmp"/model.tar.* "$dir"/ && rm -rf "$tmp" && ls -l "$dir"/model.tar.* ;;
  restore)  # restore DIR RUN: DIR's bundle (model.tar.*) as RUN/final, unpacked beside it, then moved
    # in: the archive's folder `model` (bundle), else the one named for RUN, SEED-RUN (BUNDLE_FROM)
    [ -n "${3:-}" ] && compgen -G "${2:-}/model.tar.*" > /dev/null \
      || { echo "restore DIR RUN: no bundle (model.tar.*) in '${2:-}'" >&2; exit 2; }
    [ -e "$3/final" ] && { echo "restore: $3/final is there already: not replaced" >&2; exit 2; }
    mkdir -p "$3" && rm -rf "$3"/.restore.* && tmp=$(mktemp -d "$3/.restore.XXXXXX") || exit 1  # (a killed one's)
    trap 'rm -rf "$tmp"' EXIT
    run=$(cd "$3" && pwd); member="$(basename "$(dirname "$run")")-$(basename "$run")"
    folders=$(cat "$2"/model.tar.* | tar t | cut -d/ -f1 | sort -u) \
      || { echo "restore: $2's bundle is cut short" >&2; exit 1; }
    grep -qx model <<< "$folders" && member=model  # then unpack that folder alone, not every model
    grep -qxF "$member" <<< "$folders" && cat "$2"/model.tar.* | tar x -C "$tmp" "$member" \
      && [ -f "$tmp/$member/config.json" ] \
      || { echo "restore: $2's bundle holds no folder model or $member (cut short?)" >&2; exit 1; }
    mv "$tmp/$member" "$3/final" && echo "$2" > "$3/restored_from" && echo "restored $2 -> $3/final" ;;
  *) awk 'NR > 1 && /^#$/ && ++blank == 2 { exit } NR > 1' "$0"; exit 2 ;;  # the header up to its plans
esac
