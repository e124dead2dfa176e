#!/usr/bin/env bash
# A/B of bench/train_gpt2 between a base revision and the working tree, on one GPU, in one call.
#
#   tools/gpu_ab.sh pack REV                 on the build machine: .carry/ab-base.tar = git archive REV
#   tools/gpu_ab.sh run [MODELS] [ROUNDS]    on the GPU machine (carry .carry): build both, measure
#
# `run` builds bench_train_gpt2 from the base tree and from the working tree (Release, sm_90a, every
# core), then runs the two binaries alternately ROUNDS times per model (MODELS default "124M 350M",
# ROUNDS default 3; each run 20 steps after 3 warm-up steps), and prints per model and build the
# median of the runs' step_ms_median and peak_allocated_gib, and the ratios new / base. Logs go to
# $OUT (default ./gpu-logs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-gpu-logs}"
base_tar=.carry/ab-base.tar

pack() {
  mkdir -p .carry
  git archive -o "$base_tar" "$1"
  echo "$base_tar: $(git rev-parse --short "$1") ($(du -h "$base_tar" | cut -f1))"
}

build_tree() {  # build_tree SOURCE_DIR BUILD_DIR LOG
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DSHARDGRAPH_BUILD_GPU_BENCH=ON \
    -DSHARDGRAPH_FUZZ_SECONDS=0 >"$3" 2>&1
  cmake --build "$2" -j "$(nproc)" --target bench_train_gpt2 >>"$3" 2>&1
}

run() {
  local models="${1:-124M 350M}" rounds="${2:-3}"
  [ -f "$base_tar" ] || { echo "shardgraph: gpu_ab.sh: $base_tar is missing. run 'tools/gpu_ab.sh pack REV' and carry .carry" >&2; exit 1; }
  mkdir -p "$out" /tmp/ab-base
  tar -xf "$base_tar" -C /tmp/ab-base
  build_tree /tmp/ab-base /tmp/ab-base/build-ab "$out/build-base.log" &
  build_tree . build-ab "$out/build-new.log"
  wait
  local results="$out/ab-results.txt"
  : >"$results"
  for model in $models; do
    for round in $(seq "$rounds"); do
      for build in base new; do
        local binary=build-ab/bench/train_gpt2
        [ "$build" = base ] && binary=/tmp/ab-base/build-ab/bench/train_gpt2
        "$binary" --model "$model" --steps 20 --warmup 3 >"$out/$build-$model-$round.log" 2>&1
        grep RESULT "$out/$build-$model-$round.log" | sed "s/^RESULT /$build /" >>"$results"
      done
    done
  done
  python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    build, _, record = line.partition(" ")
    r = json.loads(record)
    rows.setdefault((r["model"], build), []).append(r)
for model in sorted({m for m, _ in rows}):
    med = {b: (statistics.median(x["step_ms_median"] for x in rows[(model, b)]),
               statistics.median(x["peak_allocated_gib"] for x in rows[(model, b)]))
           for b in ("base", "new") if (model, b) in rows}
    for b, (ms, gib) in med.items():
        print(f"AB {model} {b}: step {ms:.3f} ms, peak {gib:.3f} GiB")
    if len(med) == 2:
        print(f"AB {model} new/base: step {med['new'][0] / med['base'][0]:.4f}, peak {med['new'][1] / med['base'][1]:.4f}")
PY
}

case "${1:-}" in
  pack) pack "${2:?REV}" ;;
  run) shift; run "$@" ;;
  *) echo "usage: tools/gpu_ab.sh pack REV | run [MODELS] [ROUNDS]" >&2; exit 2 ;;
esac
