#!/usr/bin/env python3
"""tools/shardgraph-run with tests/launch/launch_probe: the environment each rank gets, the TCP
bootstrap across processes, one failing rank ending the others, --timeout, the ranks ending when the
launcher is killed, and bad arguments.

    launcher_test.py <tools/shardgraph-run> <launch_probe> <base port>
"""
import os
import re
import selectors
import signal
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


def process_gone(pid):
    """True when pid has exited (a zombie that no one has reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def kill_launcher_and_watch(program, ranks, port):
    """Starts `ranks` sleeping ranks, kill -9s the launcher once each has printed its pid, and returns
    (seconds until every rank is gone or None after 20 s, all output)."""
    p = subprocess.Popen([sys.executable, launcher, "--nproc-per-node", str(ranks), "--master-port", str(port),
                          "--"] + program, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, pids = b"", []
    deadline = time.monotonic() + 60
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    while len(pids) < ranks and time.monotonic() < deadline:
        if sel.select(1):
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
            pids = [int(x) for x in re.findall(rb"pid (\d+), sleeping", output)]
    if len(pids) < ranks:
        p.kill()
        return None, output.decode(errors="replace")
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed = time.monotonic()
    while time.monotonic() - killed < 20:
        if all(process_gone(pid) for pid in pids):
            break
        time.sleep(0.1)
    gone_after = time.monotonic() - killed
    for pid in pids:
        if not process_gone(pid):
            os.kill(pid, signal.SIGKILL)  # leave nothing behind, whatever the result
    while sel.select(2):  # the rest of the output, until the last rank closes it
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        output += chunk
    return (gone_after if gone_after < 20 else None), output.decode(errors="replace")


# kill -9 of the launcher ends its ranks: its children by the parent-death signal (the probe's
# watchdog is off here)...
seconds, out = kill_launcher_and_watch([probe, "sleep-unwatched"], 2, base_port + 5)
check(seconds is not None and seconds < 5, f"kill -9 of the launcher ends its ranks ({seconds} s)", out)
# ...and ranks behind a wrapper, which the parent-death signal does not reach, by the watchdog.
seconds, out = kill_launcher_and_watch(["sh", "-c", f"'{probe}' sleep; true"], 2, base_port + 6)
check(seconds is not None and seconds < 5, f"the watchdog ends wrapped ranks when the launcher dies ({seconds} s)",
      out)
check("has ended, so this rank ends too" in out, "a rank ended by the watchdog says why", out)

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
