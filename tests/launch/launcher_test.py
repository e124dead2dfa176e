#!/usr/bin/env python3
"""tools/shardgraph-run with tests/launch/launch_probe: the environment each rank gets, the TCP
bootstrap across processes, one failing rank ending the others, --timeout, and bad arguments.

    launcher_test.py <tools/shardgraph-run> <launch_probe> <base port>
"""
import re
import subprocess
import sys
import time

launcher, probe, base_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []


def run(args, timeout=120):
    start = time.monotonic()
    p = subprocess.run([sys.executable, launcher] + args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def check(condition, what, output=""):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)
        print(output)


# Three ranks: each sees its rank, the world, its local rank, the GPU limits; the blob crosses.
code, out, err, _ = run(["--nproc-per-node", "3", "--master-port", str(base_port), "--gpus", "2",
                         "--gpu-memory", "40GiB", "--", probe, "exchange"])
check(code == 0, "exchange on 3 ranks exits 0", out + err)
for r in range(3):
    check(f"rank {r} of 3 (local {r} of 3) via torchrun-style (RANK, WORLD_SIZE): gpus 2, memory cap "
          f"{40 << 30} bytes" in out, f"rank {r} sees its placement and limits", out)
    check(f"rank {r}: blob of 128 bytes matches" in out, f"rank {r} got rank 0's blob", out)

# --tag prefixes every line with its rank.
code, out, err, _ = run(["--nproc-per-node", "2", "--master-port", str(base_port + 2), "--tag", "--", probe,
                         "exchange"])
check(code == 0 and re.search(r"^\[rank 1\] rank 1: blob of 128 bytes matches$", out, re.M) is not None,
      "--tag prefixes lines with the rank", out + err)

# One failing rank ends the others promptly, and its status is the launcher's.
code, out, err, seconds = run(["--nproc-per-node", "4", "--master-port", str(base_port + 3), "--", probe,
                               "fail", "2", "7"])
check(code == 7, "the failing rank's status 7 is the launcher's", f"status {code}\n{out}{err}")
check("rank 2 exited with status 7; ending the other 3 running rank(s)" in err, "the launcher says which rank failed",
      err)
check(seconds < 30, f"the other ranks were ended promptly ({seconds:.1f} s)", err)

# --timeout ends a run that hangs.
code, out, err, seconds = run(["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-port",
                               str(base_port + 4), "--timeout", "1", "--", probe, "sleep"])
check(code == 124, "--timeout ends a hanging run with status 124", f"status {code}\n{err}")
check("rank 2 of 4 (local 0 of 2)" in out and "rank 3 of 4 (local 1 of 2)" in out,
      "node 1's ranks are numbered 2 and 3", out)
check(seconds < 30, f"--timeout 1 returned in {seconds:.1f} s", err)

# Bad arguments: a clear message and status 2, nothing started.
for args, message in [
    (["--nproc-per-node", "0", "--", probe], "--nproc-per-node is 0"),
    (["--nproc-per-node", "2", "--node-rank", "2", "--nnodes", "2", "--", probe], "--node-rank is 2 with --nnodes 2"),
    (["--nproc-per-node", "2", "--gpu-memory", "lots", "--", probe], "--gpu-memory is 'lots'"),
    (["--nproc-per-node", "2"], "no program to run"),
    (["--nproc-per-node", "1", "--", "/no/such/program"], "cannot start '/no/such/program'"),
]:
    code, out, err, _ = run(args)
    check(code == 2 and ("shardgraph-run: " + message) in err, f"bad arguments: {message}", f"status {code}\n{err}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all launcher checks passed")
