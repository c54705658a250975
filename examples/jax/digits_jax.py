#!/usr/bin/env python3
"""A data-parallel JAX MLP on the UCI 8x8 digits, as an elastic Drover command job.

Plain JAX (no Flax or Optax: a two-layer MLP and Adam in a few lines) plus Drover's library
(python/, `pip install './python[jax]'`; found next to this file in the repository):

  drover.init()                 rank and world (from `launcher: jax`), checkpoint dir, resume
  drover.jax.initialize         jax.distributed from JAX_COORDINATOR_ADDRESS/NUM_PROCESSES/PROCESS_ID
  drover.data.GlobalBatches     the same global batches whatever the world size
  drover.jax.mean_across        each process's gradients averaged over every process
  ctx.poll()                    SIGTERM (preemption, resize) and SIGUSR1 (checkpoint now), agreed
  ctx.checkpoint + drover.jax.save/load   atomic checkpoints of parameters, optimizer state and
                                position, resumed from on every restart
  ctx.report()                  metrics for the dashboard, queue predictions and searches

Run it alone (`python examples/jax/digits_jax.py`) or as examples/jax/digits-jax.yaml. The split is
the PyTorch example's: a seeded shuffle of the 1797 rows, the last 297 are the test set.
"""
import argparse
import os
import random
import sys

import jax
import jax.numpy as jnp
import numpy as np

# In the repository, its own library (python/src); copied elsewhere, the installed one.
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src")
if os.path.isdir(os.path.join(LIBRARY, "drover")):
    sys.path.insert(0, LIBRARY)
import drover  # noqa: E402
import drover.jax as dj  # noqa: E402
from drover.data import GlobalBatches  # noqa: E402

SPLIT_SEED = 1998  # the train/test split never depends on --seed
TEST_SIZE = 297


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append([int(v) for v in line.split(",")])
    order = list(range(len(rows)))
    random.Random(SPLIT_SEED).shuffle(order)
    data = np.array([rows[i] for i in order], dtype=np.float32)
    x, y = data[:, :-1] / 16.0, data[:, -1].astype(np.int32)
    return (x[:-TEST_SIZE], y[:-TEST_SIZE]), (x[-TEST_SIZE:], y[-TEST_SIZE:])


def init_params(key, width):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (64, width)) * jnp.sqrt(2.0 / 64),
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(k2, (width, 10)) * jnp.sqrt(1.0 / width),
        "b2": jnp.zeros(10),
    }


def logits(params, x):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def loss_fn(params, x, y):
    return -jnp.mean(jax.nn.log_softmax(logits(params, x))[jnp.arange(y.shape[0]), y])


grad_fn = jax.jit(jax.value_and_grad(loss_fn))


@jax.jit
def adam(params, grads, state, lr):
    b1, b2, eps = 0.9, 0.999, 1e-8
    t = state["t"] + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
    scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, {"m": m, "v": v, "t": t}


@jax.jit
def evaluate(params, x, y):
    out = logits(params, x)
    accuracy = jnp.mean(jnp.argmax(out, axis=1) == y)
    return accuracy, loss_fn(params, x, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/digits/digits.csv", help="CSV, relative to cwd")
    ap.add_argument("--steps", type=int, default=1000, help="total training steps")
    ap.add_argument("--global-batch", type=int, default=96, help="samples per step, all processes together")
    ap.add_argument("--lr", type=float, default=0.003, help="an experiment's `lr` overrides it")
    ap.add_argument("--width", type=int, default=64, help="hidden units; an experiment's `width` overrides it")
    ap.add_argument("--seed", type=int, default=1, help="init and data order")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="default: steps/10")
    ap.add_argument("--eval-every", type=int, default=None, help="default: steps/20")
    ap.add_argument("--final-accuracy-min", type=float, default=None,
                    help="exit 3 when the final test accuracy is below it")
    args = ap.parse_args()

    ctx = drover.init()
    steps = ctx.max_steps or args.steps
    lr, width = float(ctx.hparam("lr", args.lr)), int(ctx.hparam("width", args.width))
    ckpt_every = args.checkpoint_every or max(1, steps // 10)
    eval_every = args.eval_every or max(1, steps // 20)
    dj.initialize(ctx)
    print("digits_jax: job %s generation %d process %d of %d on %s, checkpoints in %s"
          % (ctx.job_id, ctx.generation, ctx.rank, ctx.world_size, jax.devices()[0].platform,
             ctx.checkpoint_dir), flush=True)
    (train_x, train_y), (test_x, test_y) = load(args.data)

    params = init_params(jax.random.PRNGKey(args.seed), width)
    opt = {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
           "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": jnp.zeros((), jnp.int32)}
    batches = GlobalBatches(len(train_y), args.global_batch, seed=args.seed,
                            rank=ctx.rank, world_size=ctx.world_size)
    step = 0
    if ctx.resume_from is not None:
        (params, opt), extra = dj.load(ctx.resume_from, (params, opt))
        step = extra["step"]
        batches.load_state_dict(extra["batches"])
        print("resumed from step %d (%s) with a world of %d, test loss %.9g"
              % (step, ctx.resume_from, ctx.world_size, float(evaluate(params, test_x, test_y)[1])),
              flush=True)
    weight = batches.loss_weight()  # the mean over processes is then the global batch's mean

    def checkpoint():
        with ctx.checkpoint(step) as path:
            if path is not None:
                dj.save(path, (params, opt), extra={"step": step, "batches": batches.state_dict()})

    start_step, acc, window = step, None, [0.0, 0]
    while step < steps:
        index = np.asarray(batches.next())
        loss, grads = grad_fn(params, train_x[index], train_y[index])
        grads = dj.mean_across(jax.tree_util.tree_map(lambda g: g * weight, grads))
        params, opt = adam(params, grads, opt, lr)
        step += 1
        window = [window[0] + float(loss), window[1] + 1]
        if step % eval_every == 0 or step == steps:
            acc = float(evaluate(params, test_x, test_y)[0])
            ctx.report(step, loss=window[0] / window[1], accuracy=acc)
            window = [0.0, 0]
        signals = ctx.poll()  # every process, every step: they stop at the same step
        if signals.stop or signals.checkpoint or step % ckpt_every == 0 or step == steps:
            checkpoint()
        if signals.stop:
            print("checkpointed at step %d on SIGTERM" % step, flush=True)
            dj.shutdown()
            return 0

    if acc is None:  # resumed at or past the last step
        acc = float(evaluate(params, test_x, test_y)[0])
    dj.shutdown()
    print("final test accuracy %.4f after %d steps (%d this run)" % (acc, step, step - start_step),
          flush=True)
    if args.final_accuracy_min is not None and acc < args.final_accuracy_min:
        print("final test accuracy %.4f is below --final-accuracy-min %.4f"
              % (acc, args.final_accuracy_min), file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
