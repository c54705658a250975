"""Optuna's side of Drover's search benchmark (search/benches/regret.rs).

Runs RandomSampler and TPESampler (Optuna's defaults) on Branin and Hartmann-6 for the given number of
seeds (from an optional first seed) and trial count, and prints one JSON object: {function: {sampler: [[best value after trial 1..n] per seed]}}.
"""
import json
import math
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(x1, x2):
    a, b, c = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
     [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    total = 0.0
    for i in range(4):
        inner = sum(A[i][j] * (x[j] - P[i][j] * 1e-4) ** 2 for j in range(6))
        total += ALPHA[i] * math.exp(-inner)
    return -total


def objective(name):
    if name == "branin":
        return lambda t: branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15))
    return lambda t: hartmann6([t.suggest_float(f"x{j}", 0, 1) for j in range(6)])


def main():
    seeds, trials = int(sys.argv[1]), int(sys.argv[2])
    offset = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    out = {}
    for name in ["branin", "hartmann6"]:
        out[name] = {}
        for sampler_name in ["random", "tpe"]:
            curves = []
            for seed in range(offset, offset + seeds):
                sampler = (optuna.samplers.RandomSampler(seed=seed) if sampler_name == "random"
                           else optuna.samplers.TPESampler(seed=seed))
                study = optuna.create_study(sampler=sampler)
                study.optimize(objective(name), n_trials=trials)
                best, curve = math.inf, []
                for trial in study.trials:
                    best = min(best, trial.value)
                    curve.append(best)
                curves.append(curve)
            out[name][sampler_name] = curves
            print(f"optuna {name} {sampler_name}: done", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
