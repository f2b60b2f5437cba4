#!/usr/bin/env bash
# One GPU's checks and benchmarks for the real-size work (docs/benchmarks.md), in one go, each
# stage's output under OUT (OUT/STAGE.txt, and JSON where the benchmark writes one):
#
#   scripts/gpu_bench.sh OUT [STAGE ...]     # default: every stage below, in this order
#
#   tests     tests/test_gpu.py (CUDA graphs against transformers, training on CUDA)
#   sampling  benchmarks/bench_sampling.py --device cuda, 256 rows of the Qwen3 vocabulary
#   sft       the tic-tac-toe SFT step (17.6M) of this tree against BASE_SRC (a baseline's src/,
#             default bench_base/src), alternated ABBA x REPEATS, SFT_AB_STEPS steps each:
#             whole `rlvr sft` runs from one base model and one data set, seconds per step
#   scale     benchmarks/bench_scale.py (decode with its split and lookahead A/B, update; no TRL)
#             at 0.5b, then 1.7b (SCALE_SIZES), SCALE_BUDGET seconds each
#
# Make the baseline first, e.g. `git archive ea52460 src | tar -x -C bench_base` (untracked, so
# it travels with the tree). Install first: python3 -m pip install --no-deps -e . -e environments/tictactoe
set -uo pipefail
OUT=${1:?usage: scripts/gpu_bench.sh OUT [tests|sampling|sft|scale ...]}; shift
STAGES=${*:-tests sampling sft scale}
BASE_SRC=${BASE_SRC:-bench_base/src}
WORK=${WORK:-/tmp/rlvr-gpu-bench}
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true

sft_ab() {  # whole SFT runs, this tree (new) against BASE_SRC (base), ABBA order
  local steps=${SFT_AB_STEPS:-250} repeats=${REPEATS:-2}
  [ -f "$WORK/base/config.json" ] || rlvr model new --preset small --corpus tictactoe --seed 0 -o "$WORK/base"
  [ -f "$WORK/teacher.jsonl" ] || rlvr gen tictactoe -m policy:teacher -n -1 -r 1 -q -d "$WORK/teacher.jsonl" \
    --overwrite -a '{"num_tasks": 5000, "seed": 100}' \
    --filter 'loss == 0 and timeout == 0 and format_reward == 1 and invalid_moves == 0'
  local order=""
  for r in $(seq "$repeats"); do  # base new, new base, ...: a drift in the machine cancels out
    if [ $((r % 2)) = 1 ]; then order="$order base$r new$r"; else order="$order new$r base$r"; fi
  done
  for run in $order; do
    local src=src; [ "${run#base}" != "$run" ] && src=$BASE_SRC
    rm -rf "$WORK/sft-$run"
    local t0; t0=$(date +%s.%N)
    PYTHONPATH=$src python3 -m rlvr.cli sft --model "$WORK/base" --data "$WORK/teacher.jsonl" -o "$WORK/sft-$run" -q \
      --max-steps "$steps" --batch-size 64 --micro-batch-size 64 --lr 1e-3 --warmup-steps 25 --lr-schedule cosine \
      --eval-every 1000 --save-every 1000 --seed 0 > "$WORK/sft-$run.log" 2>&1 || { echo "$run failed"; tail -5 "$WORK/sft-$run.log"; }
    python3 -c "import sys; print(f'{sys.argv[1]:8s} {(float(sys.argv[3]) - float(sys.argv[2])) / int(sys.argv[4]) * 1000:.1f} ms/step (wall, start-up included)')" \
      "$run" "$t0" "$(date +%s.%N)" "$steps"
  done
}

for stage in $STAGES; do
  echo "== $stage $(date +%T)"
  case $stage in
    tests) python3 -m pytest -c /dev/null --rootdir . -W ignore::pytest.PytestConfigWarning -q tests/test_gpu.py ;;
    sampling) python3 benchmarks/bench_sampling.py --device cuda --rows 256 ;;
    sft) sft_ab ;;
    scale)
      for size in ${SCALE_SIZES:-0.5b 1.7b}; do
        python3 benchmarks/bench_scale.py --sizes "$size" --skip-trl --phases build,decode,update --budget "${SCALE_BUDGET:-300}" --out "$OUT/scale.json"
      done ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac > "$OUT/$stage.txt" 2>&1
  tail -25 "$OUT/$stage.txt"
done
echo "== done $(date +%T)"
