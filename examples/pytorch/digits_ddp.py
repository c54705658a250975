#!/usr/bin/env python3
"""A PyTorch DistributedDataParallel CNN on the UCI 8x8 digits, as an elastic Drover command job.

A plain DDP script plus Drover's library (python/, `pip install ./python`; found next to this
file in the repository), which gives it what the engine's own jobs have:

  drover.init()                  rank and world (from `launcher: torch`), checkpoint dir, resume
  drover.torch.init_process_group  gloo on CPUs, nccl on GPUs, from MASTER_ADDR/PORT
  drover.data.GlobalBatches      the same global batches whatever the world size: a job resized
                                 from 2 workers to 3 visits the samples it would have visited
  ctx.poll()                     SIGTERM (preemption, resize) and SIGUSR1 (checkpoint now),
                                 agreed by every rank at the same step
  ctx.checkpoint + drover.torch.save/load   atomic checkpoints with model, optimizer and random
                                 state, announced to Drover, resumed from on every restart
  ctx.report()                   metrics for the dashboard, queue predictions and searches

Run it alone (`python examples/pytorch/digits_ddp.py`) or as examples/pytorch/digits-ddp.yaml.
The split is fixed: a seeded shuffle of the 1797 rows, the last 297 are the test set.
"""
import argparse
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

# In the repository, its own library (python/src); copied elsewhere, the installed one.
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src")
if os.path.isdir(os.path.join(LIBRARY, "drover")):
    sys.path.insert(0, LIBRARY)
import drover  # noqa: E402
import drover.torch as dt
from drover.data import GlobalBatches

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
    data = torch.tensor([rows[i] for i in order], dtype=torch.float32)
    x, y = data[:, :-1].reshape(-1, 1, 8, 8) / 16.0, data[:, -1].long()
    return (x[:-TEST_SIZE], y[:-TEST_SIZE]), (x[-TEST_SIZE:], y[-TEST_SIZE:])


class Net(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc = torch.nn.Linear(2 * width * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


@torch.no_grad()
def evaluate(model, x, y):
    """Test accuracy and mean loss."""
    model.eval()
    logits = model(x)
    model.train()
    return (logits.argmax(1) == y).sum().item() / len(y), F.cross_entropy(logits, y).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/digits/digits.csv", help="CSV, relative to cwd")
    ap.add_argument("--steps", type=int, default=1500, help="total training steps")
    ap.add_argument("--global-batch", type=int, default=96, help="samples per step, all ranks together")
    ap.add_argument("--lr", type=float, default=0.002, help="an experiment's `lr` overrides it")
    ap.add_argument("--width", type=int, default=16,
                    help="channels of the first convolution (twice as many in the second); "
                         "an experiment's `width` overrides it")
    ap.add_argument("--seed", type=int, default=1, help="init and data order")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="default: steps/10")
    ap.add_argument("--eval-every", type=int, default=None, help="default: steps/20")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep after each step")
    ap.add_argument("--final-accuracy-min", type=float, default=None,
                    help="exit 3 if the final test accuracy is below this")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    ctx = drover.init()
    # A trial's hyper-parameters and step budget (ASHA's rungs) come from Drover.
    steps = ctx.max_steps or args.steps
    lr, width = float(ctx.hparam("lr", args.lr)), int(ctx.hparam("width", args.width))
    ckpt_every = args.checkpoint_every or max(1, steps // 10)
    eval_every = args.eval_every or max(1, steps // 20)
    device = dt.init_process_group(ctx)
    print("digits_ddp: job %s generation %d rank %d of world %d on %s, checkpoints in %s"
          % (ctx.job_id, ctx.generation, ctx.rank, ctx.world_size, device, ctx.checkpoint_dir),
          flush=True)
    (train_x, train_y), (test_x, test_y) = load(args.data)
    train_x, train_y = train_x.to(device), train_y.to(device)
    test_x, test_y = test_x.to(device), test_y.to(device)

    torch.manual_seed(args.seed)
    model = Net(width).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    batches = GlobalBatches(len(train_y), args.global_batch, seed=args.seed,
                            rank=ctx.rank, world_size=ctx.world_size)
    step, window = 0, [0.0, 0]
    if ctx.resume_from is not None:
        extra = dt.load(ctx.resume_from, model=model, optimizer=optimizer, map_location=device)
        step, window = extra["step"], extra["loss_window"]
        batches.load_state_dict(extra["batches"])
        print("resumed from step %d (%s) with a world of %d, test loss %.17g"
              % (step, ctx.resume_from, ctx.world_size, evaluate(model, test_x, test_y)[1]), flush=True)
    net = torch.nn.parallel.DistributedDataParallel(model) if ctx.world_size > 1 else model
    weight = batches.loss_weight()  # DDP averages over ranks: this makes it the global batch's mean

    def checkpoint():
        with ctx.checkpoint(step) as path:
            if path is not None:
                dt.save(path, model=model, optimizer=optimizer,
                        extra={"step": step, "batches": batches.state_dict(), "loss_window": window})

    start_step, acc = step, None
    while step < steps:
        index = torch.tensor(batches.next(), device=device)
        loss = F.cross_entropy(net(train_x[index]), train_y[index]) * weight
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        window = [window[0] + loss.item() / weight, window[1] + 1]
        if step % eval_every == 0 or step == steps:
            acc = evaluate(model, test_x, test_y)[0]
            ctx.report(step, loss=window[0] / window[1], accuracy=acc)
            window = [0.0, 0]
        signals = ctx.poll()  # every rank, every step: they stop at the same step
        if signals.stop or signals.checkpoint or step % ckpt_every == 0 or step == steps:
            checkpoint()
        if signals.stop:
            print("checkpointed at step %d on SIGTERM, test loss %.17g"
                  % (step, evaluate(model, test_x, test_y)[1]), flush=True)
            dt.shutdown()
            return 0
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)

    if acc is None:  # resumed at or past the last step
        acc = evaluate(model, test_x, test_y)[0]
    dt.shutdown()
    print("final test accuracy %.4f after %d steps (%d this run)" % (acc, step, step - start_step),
          flush=True)
    if args.final_accuracy_min is not None and acc < args.final_accuracy_min:
        print("final test accuracy %.4f is below --final-accuracy-min %.4f"
              % (acc, args.final_accuracy_min), file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
