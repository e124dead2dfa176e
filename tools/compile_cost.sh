#!/usr/bin/env bash
# The compile cost of translation units: CPU seconds and peak compiler memory of each, compiled
# as the build compiles it (its command from compile_commands.json), without ccache, ROUNDS times,
# printing the median of each.
#
#   tools/compile_cost.sh [--build DIR] [--rounds N] SOURCE...
#   tools/compile_cost.sh examples/train_gpt/main.cpp tests/models/loss_equivalence_test.cpp
#
# Prints one line per source: `<source>  cpu <seconds> s  peak <MiB> MiB`. The CPU time is the
# compiler's user + system time, which another build running beside it changes little; wall time
# is not reported.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=build
rounds=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "tools/compile_cost.sh: no source given. name a translation unit, e.g. examples/train_gpt/main.cpp" >&2
  exit 2
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "tools/compile_cost.sh: $build/compile_commands.json is missing. configure the build first (cmake -S . -B $build)" >&2
  exit 2
fi
for source in "$@"; do
  python3 - "$build/compile_commands.json" "$(realpath "$source")" "$rounds" <<'PY'
import json, os, re, statistics, subprocess, sys, tempfile
database, source, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
entry = next((e for e in json.load(open(database)) if os.path.realpath(e["file"]) == source), None)
if entry is None:
    sys.exit(f"tools/compile_cost.sh: {source} is not in {database}. name a source the build compiles")
command = entry["command"]
with tempfile.TemporaryDirectory() as scratch:
    command = re.sub(r" -o \S+", f" -o {scratch}/unit.o", command)
    seconds, peaks = [], []
    for _ in range(rounds):
        timed = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "sh", "-c", command], cwd=entry["directory"],
                               env={**os.environ, "CCACHE_DISABLE": "1"}, capture_output=True, text=True)
        if timed.returncode != 0:
            sys.exit(f"tools/compile_cost.sh: {source} did not compile:\n{timed.stderr[-2000:]}")
        user, system, peak_kib = timed.stderr.strip().splitlines()[-1].split()
        seconds.append(float(user) + float(system))
        peaks.append(int(peak_kib) / 1024)
print(f"{os.path.relpath(source)}  cpu {statistics.median(seconds):.1f} s  peak {statistics.median(peaks):.0f} MiB")
PY
done
