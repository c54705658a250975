"""Optuna's side of Drover's ASHA benchmark (cli/benches/asha_digits.rs).

The same search space and the same trainer as Drover's side: each trial trains the digits MLP with
`drover train`, to 100, 300 and 900 steps, resuming from its own checkpoint between rungs, reporting the
validation accuracy at each rung to Optuna's SuccessiveHalvingPruner (min_resource 100, reduction
factor 3) and stopping when pruned. Trials run until the given step budget is spent. Prints one JSON
list: [steps spent so far, best validation accuracy so far] after every rung.

usage: optuna_asha_digits.py DROVER_BINARY SEED BUDGET_STEPS SAMPLER(random|tpe)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
RUNGS = [100, 300, 900]


def spec(optimizer, lr, hidden, batch_size):
    block = {"type": "adamw", "weight_decay": 0.01} if optimizer == "adamw" else {"type": "sgd", "lr": 0.05, "momentum": 0.9}
    block["lr"] = lr
    return {
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "optuna-trial"},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "mlp", "hidden": [hidden]},
                "dataset": {"type": "digits"},
                "optimizer": block,
                "batch_size": batch_size,
                "max_steps": RUNGS[-1],
                "eval_every": 100,
                "seed": 1,
            },
            "checkpoint": {"every_steps": 100, "keep_last": 2},
        },
    }


def main():
    drover, seed, budget, sampler_name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    spent, best, curve = 0, 0.0, []
    work = tempfile.mkdtemp(prefix="optuna-asha-")

    def objective(trial):
        nonlocal spent, best
        optimizer = trial.suggest_categorical("optimizer", ["adamw", "sgd"])
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        hidden = trial.suggest_categorical("hidden", [32, 64, 128, 256])
        batch_size = trial.suggest_int("batch_size", 16, 256, log=True)
        directory = os.path.join(work, f"t{trial.number}")
        path = directory + ".json"
        with open(path, "w") as f:
            json.dump(spec(optimizer, lr, hidden, batch_size), f)
        previous, accuracy = 0, 0.0
        for rung in RUNGS:
            argv = [drover, "train", path, "--checkpoint-dir", directory, "--steps", str(rung)]
            if previous:
                argv += ["--resume-from", os.path.join(directory, f"step-{previous:08d}")]
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            accuracy = float(re.findall(r"val_accuracy=([0-9.]+)", out)[-1])
            spent += rung - previous
            best = max(best, accuracy)
            curve.append([spent, best])
            previous = rung
            trial.report(accuracy, rung)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return accuracy

    sampler = optuna.samplers.RandomSampler(seed=seed) if sampler_name == "random" else optuna.samplers.TPESampler(seed=seed)
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=RUNGS[0], reduction_factor=3)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    while spent < budget:
        study.optimize(objective, n_trials=1)
    print(json.dumps(curve))


if __name__ == "__main__":
    main()
