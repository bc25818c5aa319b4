#!/usr/bin/env python3
"""Restart recovery under gorun -max-restarts: a 2-rank DDP run of train,
checkpointing every 5 steps; after its first checkpoint a rank is SIGKILLed
at a random moment. Prints, per trial, the time from the kill to the first
training step of the restarted job, and the steps redone (since the last
checkpoint). Usage: bench/faults.py BIN_DIR TRIALS (BIN_DIR holds gorun and
train; go build -o bin/ ./cmd/gorun ./cmd/train)."""
import os, random, re, signal, subprocess, sys, tempfile, time

bindir, trials = sys.argv[1], int(sys.argv[2])
rng = random.Random(int(os.environ.get("SEED", "1")))
times = []
for trial in range(trials):
    with tempfile.TemporaryDirectory() as d:
        save = os.path.join(d, "run.safetensors")
        cmd = [os.path.join(bindir, "gorun"), "-np", "2", "-max-restarts", "1", os.path.join(bindir, "train"),
               "--synthetic", "--train-samples", "2560", "--test-samples", "256", "--epochs", "2", "--threads", "1",
               "--log-interval", "1", "--save", save, "--save-every", "5", "--resume", "auto"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        killed_at = None
        step_at_kill = None
        last_step = 0
        recovered = None
        resumed_step = None
        for line in p.stdout:
            now = time.monotonic()
            m = re.search(r"Train Epoch: (\d+) \[(\d+)/", line)
            if m and line.startswith("[0]"):
                if killed_at is None:
                    last_step += 1
                elif resumed_step is not None and recovered is None:
                    recovered = now - killed_at
            r = re.search(r"Resumed from .* \(step (\d+)\)|Resumed from .* after epoch (\d+)", line)
            if r:
                resumed_step = int(r.group(1) or 0)
            if killed_at is None and os.path.exists(save):
                time.sleep(rng.uniform(0, 1.0))
                pids = [int(x) for x in subprocess.run(["pgrep", "-f", os.path.join(bindir, "train")], capture_output=True, text=True).stdout.split()]
                pids = [x for x in pids if open(f"/proc/{x}/cmdline").read().startswith(os.path.join(bindir, "train"))]
                victim = rng.choice(pids)
                os.kill(victim, signal.SIGKILL)
                killed_at = time.monotonic()
                step_at_kill = last_step
        p.wait()
        if recovered is not None:
            times.append(recovered)
        print(f"trial {trial + 1}: exit {p.returncode}, resumed at step {resumed_step}, first step {recovered:.2f} s after the kill"
              if recovered else f"trial {trial + 1}: exit {p.returncode}, no recovery seen", flush=True)
times.sort()
if times:
    print(f"{len(times)} of {trials} recovered; kill to next step: min {times[0]:.2f} s, median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s")
