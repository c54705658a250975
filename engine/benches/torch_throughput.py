"""PyTorch side of the engine's throughput benchmark (engine/benches/throughput.rs).

The same architectures, batches, optimizers and thread count as the Rust side; prints
{"case": seconds per training step} as JSON. Only training steps are timed, after warm-up, on random
data of the right shape.
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit("PyTorch is not installed (pip install torch)")


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


REPEATS = 3


def step_seconds(model, optimizer, x, y, warmup, steps):
    loss_fn = nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(REPEATS):  # the fastest round counts, as on the Rust side
        started = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - started) / steps)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--text", required=True)
    args = parser.parse_args()
    global REPEATS
    REPEATS = args.repeats
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab = len(set(open(args.text, encoding="utf-8").read()))
    results = {}
    images = torch.rand(256, 784)
    labels = torch.randint(0, 10, (256,))
    # One untimed run first, so thread pools and allocators are warm for every case.
    model = mlp()
    step_seconds(model, torch.optim.SGD(model.parameters(), lr=0.01), images, labels, args.warmup, 1)
    model = mlp()
    results["mlp-adamw"] = step_seconds(model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01),
                                        images, labels, args.warmup, 60)
    model = mlp()
    results["mlp-sgd"] = step_seconds(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                      images, labels, args.warmup, 60)
    model = lenet()
    results["lenet5"] = step_seconds(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,)), args.warmup, 30)
    model = CharLm(vocab, 2, 4, 64, 64)
    tokens = torch.randint(0, vocab, (16, 64))
    results["charlm"] = step_seconds(model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01),
                                     tokens, torch.randint(0, vocab, (16 * 64,)), args.warmup, 10)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
