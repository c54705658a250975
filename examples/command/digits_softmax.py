#!/usr/bin/env python3
"""Softmax regression on the UCI 8x8 digits, as a Drover `command` job.

Standard library only. It trains a 64->10 softmax classifier (add --hidden 32
for a 64-32-10 MLP) with mini-batch SGD + momentum on data/digits/digits.csv.
The split is fixed: a seeded shuffle of the 1797 rows, the last 297 are the test set.

It uses Drover's Python library (python/, `pip install ./python`; found next to this
file in the repository) for the command-job contract:
  drover.init()        rank and world, DROVER_CHECKPOINT_DIR (default ./checkpoints),
                       DROVER_RESUME_FROM; SIGTERM and SIGUSR1 become flags ctx.poll() returns
  ctx.report()         {"drover": "metrics", ...} lines on stdout (rank 0 only)
  ctx.checkpoint_file  written to a temp name, fsynced, renamed, announced (rank 0 only)
  SIGTERM      finish the current step, checkpoint (unless step K was just checkpointed),
               print "checkpointed at step K on SIGTERM", exit 0.
  SIGUSR1      checkpoint at the end of the current step and go on.
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
import sys
import time
from operator import mul

# In the repository, its own library (python/src); copied elsewhere, the installed one.
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src")
if os.path.isdir(os.path.join(LIBRARY, "drover")):
    sys.path.insert(0, LIBRARY)
import drover  # noqa: E402
from drover.data import epoch_order

SPLIT_SEED = 1998  # the train/test split never depends on --seed
TEST_SIZE = 297
CLASSES = 10
MOMENTUM = 0.9

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


def save_checkpoint(ctx, state):
    """Rank 0 writes the checkpoint (a JSON file); the library renames and announces it."""
    with ctx.checkpoint_file(state["step"], suffix=".json") as path:
        if path is not None:
            with open(path, "w") as f:
                json.dump(state, f)


def main():
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

    ctx = drover.init()
    job_id, generation = ctx.job_id, ctx.generation
    resume_from = str(ctx.resume_from) if ctx.resume_from else ""
    print("digits_softmax: job %s generation %d rank %d of world %d, checkpoints in %s"
          % (job_id, generation, ctx.rank, ctx.world_size, ctx.checkpoint_dir), flush=True)

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
        ctx.report(step, values)
        window_sum, window_n = 0.0, 0
        return values["accuracy"]

    # A resume source inside the checkpoint dir already holds this step: the library does not
    # write it again.
    start_step, saved_at, reported_at, acc = step, None, None, None
    while step < args.steps and not ctx.preempted:
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
        signals = ctx.poll()
        if (signals.checkpoint or step % ckpt_every == 0 or step == args.steps) and saved_at != step:
            save_checkpoint(ctx, state())
            saved_at = step
        if args.step_sleep > 0 and step < args.steps:
            until = time.monotonic() + args.step_sleep
            while not ctx.preempted and time.monotonic() < until:
                time.sleep(max(0.0, min(0.05, until - time.monotonic())))

    if ctx.preempted:
        if saved_at != step:
            save_checkpoint(ctx, state())
        print("checkpointed at step %d on SIGTERM" % step, flush=True)
        return 0
    if reported_at != step:  # nothing left to train (resumed at or past --steps)
        acc = report()
    if saved_at != step:
        save_checkpoint(ctx, state())
    print("final test accuracy %.4f after %d steps (%d this run)"
          % (acc, step, step - start_step), flush=True)
    if args.final_accuracy_min is not None and acc < args.final_accuracy_min:
        print("final test accuracy %.4f is below --final-accuracy-min %.4f"
              % (acc, args.final_accuracy_min), file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
