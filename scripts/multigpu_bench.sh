#!/usr/bin/env bash
# Several GPUs of one host (docs/training.md, "Several GPUs"): each command below finishes in
# under 9 minutes on 2 x H100 (a time budget stops launching runs and prints what it has) and
# needs nothing from the internet: the models are random, of Qwen3 shapes, built here.
#
#   scripts/multigpu_bench.sh scaling OUT      # DDP: 1 vs 2 GPUs, same per-GPU batch, 0.6B, 3 repeats
#   GPUS="1 2 4" REPEATS=2 scripts/multigpu_bench.sh scaling OUT   # the same on a 4-GPU host
#   scripts/multigpu_bench.sh fsdp-speed OUT   # 2 GPUs: DDP vs FSDP2 throughput, 0.6B, 2 repeats
#   scripts/multigpu_bench.sh check-1.7b OUT   # FSDP2 x2 vs DDP x2 vs 1 GPU, first 5 steps' loss
#   scripts/multigpu_bench.sh build-4b OUT     # only build the 4B model (so check-4b has its 9 minutes)
#   scripts/multigpu_bench.sh check-4b OUT     # FSDP2 x2 vs 1 GPU (may not fit: reported), 4B
#   CHECK_ARGS="--ddp --batch 64" scripts/multigpu_bench.sh check-4b OUT   # as measured on 2 x H200
#                                              # (DDP x2 at 4B needs about 90 GiB a GPU)
#   The checks train every side and step on the same rollouts (bench_multigpu.py --replay).
#
# OUT receives the printed table (OUT/NAME.txt) and every number as JSON (OUT/NAME.json).
# Models are built once into $MODELS (default /tmp/rlvr-multigpu-models) and reused while the
# machine stays up. Install first: python3 -m pip install --no-deps -e . -e environments/tictactoe
set -euo pipefail

what=${1:?usage: scripts/multigpu_bench.sh scaling|fsdp-speed|check-1.7b|build-4b|check-4b OUT}
OUT=${2:?usage: scripts/multigpu_bench.sh $what OUT}
MODELS=${MODELS:-/tmp/rlvr-multigpu-models}
BENCH="python3 benchmarks/bench_multigpu.py"
mkdir -p "$OUT" "$MODELS"

model() {  # model SHAPE: the folder of a random model of SHAPE, built when missing
  local dir="$MODELS/$1"
  [ -f "$dir/config.json" ] || $BENCH build --shape "$1" --out "$dir" >&2
  echo "$dir"
}

budget() { echo $((520 - SECONDS)); }  # seconds left of this command's 520

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/$what.gpus.txt" || true
case $what in
  scaling)
    m=$(model 0.6b)
    $BENCH scaling --model "$m" --gpus ${GPUS:-1 2} --repeats "${REPEATS:-3}" --budget "$(budget)" --json "$OUT/$what.json" \
      | tee "$OUT/$what.txt" ;;
  fsdp-speed)
    m=$(model 0.6b)
    $BENCH scaling --model "$m" --gpus 2 --fsdp --repeats 2 --budget "$(budget)" --json "$OUT/$what.json" \
      | tee "$OUT/$what.txt" ;;
  check-1.7b)
    m=$(model 1.7b)
    $BENCH fsdp-check --model "$m" --ddp --one-gpu ${CHECK_ARGS:-} --budget "$(budget)" --json "$OUT/$what.json" \
      | tee "$OUT/$what.txt" ;;
  build-4b)
    model 4b > /dev/null ;;
  check-4b)
    m=$(model 4b)
    $BENCH fsdp-check --model "$m" --one-gpu --timeout 330 ${CHECK_ARGS:-} --budget "$(budget)" --json "$OUT/$what.json" \
      | tee "$OUT/$what.txt" ;;
  *) echo "unknown command $what" >&2; exit 2 ;;
esac
echo "total ${SECONDS}s" | tee -a "$OUT/$what.txt"
