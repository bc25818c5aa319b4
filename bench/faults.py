#!/usr/bin/env python3
"""Faults: a 4-rank DDP run of train (the MNIST net on 4096 generated
images, one epoch, batch 64 per rank, a checkpoint every 2 steps) loses a
rank to SIGKILL at a random moment (0 to 2 s after the first checkpoint),
under each of gorun's modes:

  abort    the job ends: time from the kill to gorun's exit, and whether
           gorun named the killed rank;
  restart  gorun -max-restarts 1 starts every rank again, resuming from the
           last checkpoint: time from the kill to the restarted job's first
           step, and the steps redone;
  shrink   gorun -on-failure shrink: the others go on without it: time from
           the kill to their first step after the shrink, and whether the
           epoch's samples went on where they stopped (that step's position
           is the last one before the shrink plus one step of 4 x 64: none
           lost, none trained on twice).

  torch    PyTorch 1.13 DDP (gloo) on the same work, losing a rank the
           same way (bench/competitors/torch_faults.py): time from the kill
           to the last survivor's exit; run this script with Debian's
           /usr/bin/python3 for it.

A run that outlives 120 s counts as a hang. The modes take turns, trial by
trial. Usage:
  go build -o bin/ ./cmd/gorun ./cmd/train
  /usr/bin/python3 bench/faults.py bin TRIALS [MODES...]   (SEED=n picks the kill moments)
"""
import os, random, re, signal, subprocess, sys, tempfile, threading, time

bindir, trials = sys.argv[1], int(sys.argv[2])
modes = sys.argv[3:] or ["abort", "restart", "shrink", "torch"]
rng = random.Random(int(os.environ.get("SEED", "1")))
train = os.path.join(os.path.abspath(bindir), "train")
STEP = 4 * 64


def ranks():
    """pid by RANK of the live train processes."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/exe") != train:
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        for kv in env:
            if kv.startswith(b"RANK="):
                out[int(kv[5:])] = int(pid)
    return out


def trial(mode):
    if mode == "torch":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "competitors"))
        import torch_faults
        return torch_faults.trial(rng)
    with tempfile.TemporaryDirectory() as d:
        save = os.path.join(d, "run.safetensors")
        flags = {"abort": [], "restart": ["-max-restarts", "1"], "shrink": ["-on-failure", "shrink"]}[mode]
        cmd = [os.path.join(bindir, "gorun"), "-np", "4"] + flags + [train, "--synthetic", "--train-samples", "4096",
               "--test-samples", "256", "--epochs", "1", "--threads", "1", "--log-interval", "1", "--progress", "lines",
               "--save", save, "--save-every", "2"] + (["--resume", "auto"] if mode == "restart" else [])
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []  # (arrival, line)
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), l) for l in p.stdout))
        reader.start()
        start = time.monotonic()
        while not os.path.exists(save + ".train") and p.poll() is None and time.monotonic() < start + 60:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 2.0))
        live = ranks()
        victim = rng.choice(sorted(live))
        os.kill(live[victim], signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            reader.join()
            return "HANG (killed after 120 s)", None
        end = time.monotonic() - killed_at
        reader.join()
        text = "".join(l for _, l in lines)
        if mode == "abort":
            return f"exit {p.returncode} {end:.2f} s after the kill, rank {victim} named: {f'rank {victim} (pid' in text}", end
        # The recovered job: after "Resumed from" (restart) or the first
        # survivor's "going on with" (shrink).
        last_pos = last_step = 0
        after = first_pos = resumed = None
        recovered = False
        for t, line in lines:
            m = re.search(r"Train Epoch: \d+ \[(\d+)/", line)
            if m and not recovered:
                last_pos, last_step = int(m.group(1)), last_step + 1
            elif m and after is None:
                after, first_pos = t - killed_at, int(m.group(1))
            r = re.search(r"Resumed from .* \(step (\d+)\)|Resumed from .* after epoch", line)
            if r and t > killed_at:
                resumed, recovered = int(r.group(1) or 0), True
            if "going on with" in line:
                recovered = True
        if after is None:
            return f"exit {p.returncode}, no step after the kill (killed rank {victim} after step {last_step})", None
        if mode == "restart":
            return f"exit {p.returncode}, next step {after:.2f} s after the kill, {last_step - resumed} steps redone", after
        ok = first_pos == last_pos + STEP
        return (f"exit {p.returncode}, next step {after:.2f} s after the kill (rank {victim}), position {last_pos} then {first_pos}: "
                + ("no sample lost or repeated" if ok else "SAMPLES LOST OR REPEATED")), after


# The modes take turns, trial by trial, so that a slower phase of the
# machine falls on all of them.
times = {mode: [] for mode in modes}
for i in range(trials):
    for mode in modes:
        what, t = trial(mode)
        print(f"{mode} {i + 1}: {what}", flush=True)
        if t is not None:
            times[mode].append(t)
for mode in modes:
    ts = sorted(times[mode])
    if ts:
        print(f"{mode}: {len(ts)} of {trials} measured; min {ts[0]:.2f} s, median {ts[len(ts) // 2]:.2f} s, max {ts[-1]:.2f} s", flush=True)
