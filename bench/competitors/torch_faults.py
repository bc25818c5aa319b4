"""PyTorch DDP (gloo) losing a rank, for bench/faults.py's comparison: 4
ranks train the MNIST net on 4096 random images (batch 64 per rank, one
thread each); a random rank is SIGKILLed 0 to 2 s after the second step.
Prints, per trial, how the survivors ended (their exit statuses and the
last line each wrote) and how long after the kill the last one exited; a
survivor alive 120 s after the kill is a hang (torch has no shrink, and
Debian's torchrun, whose agent would restart the job, fails on Python
3.11 before starting workers).

    /usr/bin/python3 bench/competitors/torch_faults.py TRIALS   (SEED=n)
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time


def worker():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "model", "testdata"))
    from torchref import MNISTNet

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    n = 4096
    x, y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    model = torch.nn.parallel.DistributedDataParallel(MNISTNet())
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    mine = list(range(rank, n, world))
    for step, i in enumerate(range(0, len(mine), 64)):
        b = mine[i:i + 64]
        opt.zero_grad()
        F.nll_loss(model(x[b]), y[b]).backward()
        opt.step()
        print(f"step {step + 1}", flush=True)
    dist.destroy_process_group()


def trial(rng):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs, last = [], {}
    for r in range(4):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", TORCH_WORKER="1")
        procs.append(subprocess.Popen([sys.executable, __file__], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    steps = threading.Event()

    def read(r, p):
        for line in p.stdout:
            if line.strip():
                last[r] = line.strip()
            if line.startswith("step 2"):
                steps.set()
    readers = [threading.Thread(target=read, args=(r, p)) for r, p in enumerate(procs)]
    for t in readers:
        t.start()
    steps.wait(120)
    time.sleep(rng.uniform(0, 2.0))
    victim = rng.randrange(4)
    procs[victim].kill()
    killed = time.monotonic()
    ends = {}
    while len(ends) < 3 and time.monotonic() < killed + 120:
        for r, p in enumerate(procs):
            if r != victim and r not in ends and p.poll() is not None:
                ends[r] = time.monotonic() - killed
        time.sleep(0.01)
    hung = [r for r, p in enumerate(procs) if r != victim and p.poll() is None]
    for p in procs:
        if p.poll() is None:
            p.kill()
    for t in readers:
        t.join()
    if hung:
        return f"killed rank {victim}: ranks {hung} HANG (alive 120 s after the kill)", None
    status = {r: procs[r].returncode for r in ends}
    return (f"killed rank {victim}: the others exited {status} within {max(ends.values()):.2f} s; last lines: "
            + "; ".join(f"{r}: {last.get(r, '')[:120]}" for r in sorted(ends))), max(ends.values())


if __name__ == "__main__":
    if os.environ.get("TORCH_WORKER"):
        worker()
        sys.exit(0)
    rng = random.Random(int(os.environ.get("SEED", "1")))
    trials = int(sys.argv[1])
    times = []
    for i in range(trials):
        what, t = trial(rng)
        print(f"torch abort {i + 1}: {what}", flush=True)
        if t is not None:
            times.append(t)
    times.sort()
    if times:
        print(f"torch abort: {len(times)} of {trials} ended; min {times[0]:.2f} s, median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s")
