#!/usr/bin/env bash
# One call on a CUDA machine: build the GPU targets, run the GPU tests and the GPU benches, every log
# under $OUT (default ./gpu-logs), a summary at the end of the output.
#
#   tools/gpu_session.sh STAGE...
#
# Stages, run in the order given:
#   build        configure build-gpu (Release, sm_90a) and build the GPU tests, benches and the converter
#   test         ctest -L gpu
#   train        bench/train_gpt2 for 124M (median of 10 steps) and its per-op profile
#   attention    bench/attention_cuda (the own flash kernels and cuDNN's, alone) and bench/attention_pytorch.py
#   kernels      bench/memory_bound_cuda (the step's memory-bound kernels alone, TB/s)
#   compare      bench/compare_pytorch.py for 124M and 350M, eager and torch.compile, in one run
#   load-1b      random llama-1b (bf16) checkpoint, bench/load_hf/compare_hf.py against from_pretrained
#   load-7b      the same for llama-7b
# SHARDGRAPH_GPU_JOBS sets the build's parallelism (default: the number of cores);
# SHARDGRAPH_COMPARE_MODELS (124M, 350M or both) and SHARDGRAPH_COMPARE_MODES (eager,compile) narrow
# the compare stage when the machine's time is short.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
jobs="${SHARDGRAPH_GPU_JOBS:-$(nproc)}"
compare_models="${SHARDGRAPH_COMPARE_MODELS:-both}"
compare_modes="${SHARDGRAPH_COMPARE_MODES:-eager,compile}"
summary="$out/summary.txt"
: >"$summary"

note() { echo "$*" | tee -a "$summary"; }
timed() {  # timed NAME COMMAND...: runs it, logs to $out/NAME.log, notes the status and seconds
  local name="$1"; shift
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc in $((SECONDS - start)) s"
  return $rc
}

stage_build() {
  timed configure cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DSHARDGRAPH_BUILD_GPU_BENCH=ON \
    -DSHARDGRAPH_FUZZ_SECONDS=0 || { tail -30 "$out/configure.log"; return 1; }
  local targets
  targets=$(cmake --build build-gpu --target help | awk '/^\.\.\. ((cuda|nccl|mpi_nccl)[a-z_]*|bench_train_gpt2|bench_attention_cuda|bench_memory_bound_cuda|bench_load_hf|shardgraph_convert|bench_gemm_cuda)$/ {print $2}' | tr '\n' ' ')
  timed build cmake --build build-gpu -j "$jobs" --target $targets || { grep -m20 -B2 -A10 "error" "$out/build.log"; return 1; }
}

stage_test() {
  timed test ctest --test-dir build-gpu -L gpu --output-on-failure -j 1
  grep -E "tests passed|Failed|\*\*\*|Passed|Skipped" "$out/test.log" | tee -a "$summary"
}

stage_train() {
  timed train build-gpu/bench/train_gpt2 --model 124M --steps 10 --warmup 3
  grep RESULT "$out/train.log" | tee -a "$summary"
  timed profile build-gpu/bench/train_gpt2 --model 124M --steps 3 --warmup 2 --profile 1
  grep -E "KERNEL|RESULT" "$out/profile.log" | head -40 | tee -a "$summary"
}

stage_attention() {
  timed attention build-gpu/bench/attention_cuda --repeat 20
  PYTHONUNBUFFERED=1 timed attention-pytorch python3 bench/attention_pytorch.py --repeat 20
  cat "$out/attention.log" "$out/attention-pytorch.log" | grep '^{' | tee -a "$summary"
}

stage_kernels() {
  timed kernels build-gpu/bench/memory_bound_cuda --repeat 20
  grep '^{' "$out/kernels.log" | tee -a "$summary"
}

stage_compare() {
  PYTHONUNBUFFERED=1 timed compare python3 bench/compare_pytorch.py --model "$compare_models" --steps 10 \
    --warmup 3 --modes "$compare_modes" --shardgraph build-gpu/bench/train_gpt2
  grep -E "RESULT|RATIO|\|" "$out/compare.log" | tee -a "$summary"
}

load_stage() {  # load_stage PRESET REPEAT
  local dir="/tmp/random-$1"
  [ -d "$dir" ] || timed "make-$1" build-gpu/tools/shardgraph-convert random "$dir" --preset "$1" --dtype bf16
  du -sh "$dir" | tee -a "$summary"
  PYTHONUNBUFFERED=1 timed "load-$1" python3 bench/load_hf/compare_hf.py --binary build-gpu/bench/load_hf \
    --repeat "$2" --meshes tp=1,tp=4 "$dir"
  grep -vE '^\{' "$out/load-$1.log" | tail -20 | tee -a "$summary"
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$summary"
for stage in "$@"; do
  case "$stage" in
    build) stage_build || exit 1 ;;
    test) stage_test ;;
    train) stage_train ;;
    attention) stage_attention ;;
    kernels) stage_kernels ;;
    compare) stage_compare ;;
    load-1b) load_stage llama-1b 3 ;;
    load-7b) load_stage llama-7b 2 ;;
    *) echo "shardgraph: gpu_session.sh: unknown stage '$stage'. Use build, test, train, attention, kernels, compare, load-1b, load-7b"; exit 2 ;;
  esac
done
echo "==== summary"; cat "$summary"
