"""PyTorch side of the engine's throughput benchmark (engine/benches/throughput.rs).

The same architectures, batches, optimizers, thread count and data as the Rust side: the benchmark
writes the engine's synthetic training set (and points at its text) and this script draws batches
from it the same way, a fresh random order every epoch, the gather inside the timed step on both
sides. It runs as the benchmark's child: each line on stdin names a case, a step count and a
configuration, and the script answers with the seconds per step of one timed round (the case is
built and warmed up on its first round in that configuration), so the two sides' rounds interleave
and the machine's other load hits both alike. Configurations:

- `default`: PyTorch's default optimizers (for-each implementation), eager mode;
- `fused`: the fused optimizers (`fused=True`), eager mode: PyTorch's fastest eager configuration;
- `compiled`: `torch.compile` of the model with the fused optimizers.

A configuration that cannot run here answers `error: <reason>`. On `--device cuda` the data, model
and optimizer live on the GPU and each round ends with a synchronisation. Prints "ready" once
PyTorch is loaded.
"""
import argparse
import math
import sys
import time

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as err:
    # Name what is missing: PyTorch itself, or a module it needs (numpy).
    sys.exit(f"cannot import {err.name or 'PyTorch'} (pip install torch numpy): {err}")


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // h) + mask[:t, :t]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class CharLm(nn.Module):
    def __init__(self, vocab, layers, heads, d, context):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        mask = torch.full((context, context), -1e9).triu(1)
        self.register_buffer("mask", mask)

    def forward(self, idx):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe[:t]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln_f(x)).view(b * t, -1)


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


class Batches:
    """Random batches of rows, a fresh order every epoch (the engine's sampler does the same)."""

    def __init__(self, rows, batch, device):
        self.rows, self.batch, self.device, self.order, self.at = rows, batch, device, None, rows

    def next(self):
        if self.at + self.batch > self.rows:
            self.order, self.at = torch.randperm(self.rows, device=self.device), 0
        idx = self.order[self.at:self.at + self.batch]
        self.at += self.batch
        return idx


class Case:
    def __init__(self, model, optimizer, batch_fn):
        self.model, self.optimizer, self.batch_fn = model, optimizer, batch_fn
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self):
        x, y = self.batch_fn()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()


def build(name, config, data, device):
    images, labels, tokens, context = data
    fused = {} if config == "default" else {"fused": True}
    if name in ("mlp-adamw", "mlp-sgd", "lenet5"):
        batch = 64 if name == "lenet5" else 256
        batches = Batches(len(labels), batch, device)
        shape = (batch, 1, 28, 28) if name == "lenet5" else (batch, images.shape[1])

        def batch_fn():
            idx = batches.next()
            return images.index_select(0, idx).view(shape), labels.index_select(0, idx)

        model = (lenet() if name == "lenet5" else mlp()).to(device)
        if name == "mlp-adamw":
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, **fused)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **fused)
    elif name == "charlm":
        vocab = int(tokens.max()) + 1
        windows = Batches((len(tokens) - 1) // context, 16, device)
        offsets = torch.arange(context, device=device)

        def batch_fn():
            starts = windows.next() * context
            idx = starts[:, None] + offsets
            return tokens[idx], tokens[idx + 1].view(-1)

        model = CharLm(vocab, 2, 4, 64, context).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, **fused)
    else:
        raise SystemExit(f"unknown case {name}")
    if config == "compiled":
        model = torch.compile(model)
    return Case(model, optimizer, batch_fn)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--images", required=True, help="f32 rows of --features values")
    parser.add_argument("--labels", required=True, help="u32 labels, one per row")
    parser.add_argument("--features", type=int, required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("PyTorch here has no CUDA")
    images = torch.from_numpy(np.fromfile(args.images, dtype="<f4").reshape(-1, args.features))
    labels = torch.from_numpy(np.fromfile(args.labels, dtype="<u4").astype(np.int64))
    text = open(args.text, encoding="utf-8").read()
    vocab = {c: i for i, c in enumerate(sorted(set(text)))}
    tokens = torch.tensor([vocab[c] for c in text], dtype=torch.int64)
    data = (images.to(device), labels.to(device), tokens.to(device), args.context)
    cases, failed = {}, {}
    print("ready", flush=True)
    for line in sys.stdin:
        name, steps, config = line.split()
        if (name, config) in failed:
            print(failed[(name, config)], flush=True)
            continue
        try:
            case = cases.get((name, config))
            if case is None:
                case = build(name, config, data, device)
                for _ in range(args.warmup):
                    case.step()
                cases[(name, config)] = case
            sync(device)
            started = time.perf_counter()
            for _ in range(int(steps)):
                case.step()
            sync(device)
            print((time.perf_counter() - started) / int(steps), flush=True)
        except Exception as err:  # a configuration this PyTorch cannot run: say why, go on
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            failed[(name, config)] = f"error: {type(err).__name__}: {reason}"[:300]
            print(failed[(name, config)], flush=True)


if __name__ == "__main__":
    main()
