#!/usr/bin/env python3
"""Softmax regression on the UCI 8x8 digits, as a Drover `command` job.

Standard library only. It trains a 64->10 softmax classifier (add --hidden 32
for a 64-32-10 MLP) with mini-batch SGD + momentum on data/digits/digits.csv.
The split is fixed: a seeded shuffle of the 1797 rows, the last 297 are the test set.

Drover command-job contract, as implemented here:
  environment  DROVER_JOB_ID, DROVER_GENERATION, DROVER_RANK, DROVER_WORLD_SIZE,
               DROVER_CHECKPOINT_DIR (write checkpoints inside it; default ./checkpoints),
               DROVER_RESUME_FROM (checkpoint path to resume from; unset/empty: fresh).
  stdout       one JSON object per line, flushed at once, among free-form lines:
               {"drover": "metrics", "step": 120, "values": {"loss": 0.41, "accuracy": 0.93}}
               {"drover": "checkpoint", "step": 200, "path": "step-000200.json"}
               `path` is relative to the checkpoint dir and is announced only after the
               file was written to a temp name, fsynced, renamed and the dir fsynced.
  SIGTERM      finish the current step, checkpoint and announce it (unless step K was just
               checkpointed), print "checkpointed at step K on SIGTERM", exit 0.
  SIGUSR1      checkpoint at the end of the current step, announce it, and go on.
  resume       a checkpoint holds weights, momentum, random.getstate() and the data cursor
               (epoch, position); the epoch order is a function of (seed, epoch) only, so
               resuming at step k and running to n gives bit-identical weights.
Ranks do not communicate: with a world size above 1 every rank trains the same replica
and only rank 0 reports metrics and writes checkpoints.
"""
import argparse
import json
import math
import os
import random
import signal
import sys
import time
from operator import mul

SPLIT_SEED = 1998  # the train/test split never depends on --seed
TEST_SIZE = 297
CLASSES = 10
MOMENTUM = 0.9

stop_requested = False
checkpoint_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True


def on_sigusr1(signum, frame):
    global checkpoint_requested
    checkpoint_requested = True


def say(obj):
    print(json.dumps(obj), flush=True)


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                vals = [int(v) for v in line.split(",")]
                rows.append(([v / 16.0 for v in vals[:-1]], vals[-1]))
    order = list(range(len(rows)))
    random.Random(SPLIT_SEED).shuffle(order)
    data = [rows[i] for i in order]
    return data[:-TEST_SIZE], data[-TEST_SIZE:]


def epoch_order(seed, epoch, n):
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def init_layers(sizes):
    """Layers as [W (rows = outputs), b]; He-normal init from the global `random`."""
    return [[[[random.gauss(0.0, math.sqrt(2.0 / n_in)) for _ in range(n_in)] for _ in range(n_out)],
             [0.0] * n_out] for n_in, n_out in zip(sizes, sizes[1:])]


def forward(layers, x):
    """Activations of every layer (input first); ReLU between layers, logits last."""
    acts = [x]
    for i, (W, b) in enumerate(layers):
        z = [bj + sum(map(mul, w, acts[-1])) for w, bj in zip(W, b)]
        acts.append(z if i == len(layers) - 1 else [v if v > 0.0 else 0.0 for v in z])
    return acts


def softmax_xent(logits, y):
    m = max(logits)
    e = [math.exp(v - m) for v in logits]
    s = sum(e)
    return [v / s for v in e], math.log(s) - (logits[y] - m)


def train_step(layers, velocity, batch, lr):
    grads = [[[[0.0] * len(w) for w in W], [0.0] * len(b)] for W, b in layers]
    total = 0.0
    for x, y in batch:
        acts = forward(layers, x)
        p, loss = softmax_xent(acts[-1], y)
        total += loss
        delta = p
        delta[y] -= 1.0
        for li in range(len(layers) - 1, -1, -1):
            W = layers[li][0]
            gW, gb = grads[li]
            a_in = acts[li]
            for j, d in enumerate(delta):
                if d != 0.0:
                    gb[j] += d
                    gW[j] = [g + d * a for g, a in zip(gW[j], a_in)]
            if li > 0:  # back through the ReLU of the layer below
                delta = [sum(map(mul, col, delta)) if a > 0.0 else 0.0
                         for col, a in zip(zip(*W), a_in)]
    scale = 1.0 / len(batch)
    for (W, b), (vW, vb), (gW, gb) in zip(layers, velocity, grads):
        for w, v, g in zip(W + [b], vW + [vb], gW + [gb]):
            for i in range(len(w)):
                v[i] = MOMENTUM * v[i] + g[i] * scale
                w[i] -= lr * v[i]
    return total / len(batch)


def accuracy(layers, data):
    correct = 0
    for x, y in data:
        logits = forward(layers, x)[-1]
        correct += logits.index(max(logits)) == y
    return correct / len(data)


def save_checkpoint(ckpt_dir, state):
    name = "step-%06d.json" % state["step"]
    tmp = os.path.join(ckpt_dir, ".%s.tmp-%d" % (name, os.getpid()))
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(ckpt_dir, name))
    dir_fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    say({"drover": "checkpoint", "step": state["step"], "path": name})


def main():
    global checkpoint_requested
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/digits/digits.csv", help="CSV, relative to cwd")
    ap.add_argument("--steps", type=int, default=6000, help="total training steps")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=0, help="hidden units (0: softmax regression)")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="default: steps/10")
    ap.add_argument("--eval-every", type=int, default=None, help="default: steps/20")
    ap.add_argument("--seed", type=int, default=1, help="init and data order")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep after each step")
    ap.add_argument("--final-accuracy-min", type=float, default=None,
                    help="exit 3 if the final test accuracy is below this")
    args = ap.parse_args()
    ckpt_every = args.checkpoint_every or max(1, args.steps // 10)
    eval_every = args.eval_every or max(1, args.steps // 20)

    env = os.environ
    job_id = env.get("DROVER_JOB_ID") or "local"
    generation = int(env.get("DROVER_GENERATION") or 0)
    rank = int(env.get("DROVER_RANK") or 0)
    world = int(env.get("DROVER_WORLD_SIZE") or 1)
    ckpt_dir = env.get("DROVER_CHECKPOINT_DIR") or "checkpoints"
    resume_from = env.get("DROVER_RESUME_FROM") or ""
    leader = rank == 0
    os.makedirs(ckpt_dir, exist_ok=True)
    for name in os.listdir(ckpt_dir) if leader else []:  # temp files of a killed writer
        if name.startswith(".step-") and ".tmp-" in name:
            os.remove(os.path.join(ckpt_dir, name))
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGUSR1, on_sigusr1)
    print("digits_softmax: job %s generation %d rank %d of world %d, checkpoints in %s"
          % (job_id, generation, rank, world, os.path.abspath(ckpt_dir)), flush=True)

    train, test = load(args.data)
    config = {"seed": args.seed, "batch_size": args.batch_size, "lr": args.lr, "hidden": args.hidden}
    if resume_from:
        with open(resume_from) as f:
            ck = json.load(f)
        if ck["config"] != config:
            print("warning: checkpoint config %s differs from %s" % (ck["config"], config),
                  file=sys.stderr, flush=True)
        step, epoch, pos = ck["step"], ck["epoch"], ck["position"]
        layers, velocity = ck["layers"], ck["velocity"]
        version, internal, gauss_next = ck["random_state"]
        random.setstate((version, tuple(internal), gauss_next))
        window_sum, window_n = ck["loss_window"]
        print("resumed from step %d (%s)" % (step, resume_from), flush=True)
    else:
        random.seed(args.seed)
        sizes = [len(train[0][0])] + ([args.hidden] if args.hidden else []) + [CLASSES]
        layers = init_layers(sizes)
        velocity = [[[[0.0] * len(w) for w in W], [0.0] * len(b)] for W, b in layers]
        step, epoch, pos, window_sum, window_n = 0, 0, 0, 0.0, 0
    order = epoch_order(args.seed, epoch, len(train))

    def state():
        return {"step": step, "epoch": epoch, "position": pos, "config": config,
                "job_id": job_id, "generation": generation,
                "layers": layers, "velocity": velocity, "loss_window": [window_sum, window_n],
                "random_state": list(random.getstate())}

    def report():
        nonlocal window_sum, window_n
        values = {"accuracy": round(accuracy(layers, test), 6)}
        if window_n:
            values = {"loss": round(window_sum / window_n, 6), **values}
        if leader:
            say({"drover": "metrics", "step": step, "values": values})
        window_sum, window_n = 0.0, 0
        return values["accuracy"]

    # A resume source inside ckpt_dir already holds this step: do not announce it twice.
    in_dir = resume_from and os.path.dirname(os.path.realpath(resume_from)) == os.path.realpath(ckpt_dir)
    start_step, saved_at, reported_at, acc = step, (step if in_dir else None), None, None
    while step < args.steps and not stop_requested:
        batch = [train[i] for i in order[pos:pos + args.batch_size]]
        window_sum += train_step(layers, velocity, batch, args.lr)
        window_n += 1
        step += 1
        pos += len(batch)
        if pos >= len(train):
            epoch, pos = epoch + 1, 0
            order = epoch_order(args.seed, epoch, len(train))
        if step % eval_every == 0 or step == args.steps:
            acc, reported_at = report(), step
        requested, checkpoint_requested = checkpoint_requested, False
        if leader and (requested or step % ckpt_every == 0 or step == args.steps) and saved_at != step:
            save_checkpoint(ckpt_dir, state())
            saved_at = step
        if args.step_sleep > 0 and step < args.steps:
            until = time.monotonic() + args.step_sleep
            while not stop_requested and time.monotonic() < until:
                time.sleep(max(0.0, min(0.05, until - time.monotonic())))

    if stop_requested:
        if leader and saved_at != step:
            save_checkpoint(ckpt_dir, state())
        print("checkpointed at step %d on SIGTERM" % step, flush=True)
        return 0
    if reported_at != step:  # nothing left to train (resumed at or past --steps)
        acc = report()
    if leader and saved_at != step:
        save_checkpoint(ckpt_dir, state())
    print("final test accuracy %.4f after %d steps (%d this run)"
          % (acc, step, step - start_step), flush=True)
    if args.final_accuracy_min is not None and acc < args.final_accuracy_min:
        print("final test accuracy %.4f is below --final-accuracy-min %.4f"
              % (acc, args.final_accuracy_min), file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
