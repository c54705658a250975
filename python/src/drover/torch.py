"""PyTorch glue: the process group of a ``launcher: torch`` job, and checkpoints that resume exactly.

Owns what a PyTorch script needs beyond :mod:`drover.context`: joining the job's process group
(``env://``, from the variables the launcher sets), agreeing on stop/checkpoint signals across
ranks, and saving/loading a model, optimizer, LR scheduler and every random generator so that a
resumed run continues bit-for-bit where it stopped (on the same hardware and world size).
"""

import os
import random
import sys
from datetime import timedelta
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
except ModuleNotFoundError as err:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError("drover.torch needs PyTorch: pip install torch (or './python[torch]')",
                              name=err.name) from err

__all__ = ["init_process_group", "shutdown", "unwrap", "save", "load", "STATE_FILE"]

#: The file :func:`save` writes inside a checkpoint directory.
STATE_FILE = "state.pt"


def init_process_group(ctx, backend=None, timeout_s=600):
    """Joins the job's process group and returns this process's ``torch.device``.

    The device is ``cuda:<local_rank>`` when CUDA is available, else the CPU. With more than one
    process the group is made from ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` (set by
    ``spec.distributed.launcher: torch``) with ``nccl`` on GPUs and ``gloo`` on CPUs, and
    ``ctx.poll()`` becomes a collective that every rank answers alike.
    """
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", ctx.local_rank)
        torch.cuda.set_device(device)
    if ctx.world_size > 1:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            raise RuntimeError("a world of %d processes without MASTER_ADDR/MASTER_PORT: give the job "
                               "spec.distributed.launcher: torch" % ctx.world_size)
        backend = backend or ("nccl" if device.type == "cuda" else "gloo")
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method="env://", rank=ctx.rank,
                                    world_size=ctx.world_size, timeout=timedelta(seconds=timeout_s))
        flags = torch.zeros(2, dtype=torch.int32, device=device)

        def agree(stop, checkpoint):
            flags[0], flags[1] = int(stop), int(checkpoint)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            both = flags.tolist()
            return bool(both[0]), bool(both[1])

        ctx._agree = agree
    return device


def shutdown():
    """Leaves the process group (if one was joined): call it before the script returns."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def unwrap(model):
    """The module inside ``DistributedDataParallel`` / ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "module", None)
        if inner is None:
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def _rng_state():
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached)
    return state


def _set_rng_state(state):
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((kind, keys.cpu().numpy().astype("uint32"), pos, has_gauss, cached))


def save(directory, model=None, optimizer=None, scheduler=None, extra=None):
    """Writes ``state.pt`` into ``directory`` (the path ``ctx.checkpoint(step)`` gave the chief).

    It holds the model's parameters (unwrapped), the optimizer's and scheduler's state, Python's,
    PyTorch's, CUDA's and NumPy's random state, and ``extra`` (plain data: step, sampler state, ...).
    """
    state = {"rng": _rng_state(), "extra": extra}
    if model is not None:
        state["model"] = unwrap(model).state_dict()
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    torch.save(state, Path(directory) / STATE_FILE)


def load(directory, model=None, optimizer=None, scheduler=None, map_location="cpu", restore_rng=True):
    """Loads what :func:`save` wrote into the given objects and returns its ``extra``.

    ``directory`` is usually ``ctx.resume_from``. Loading uses ``weights_only=True``: tensors and
    plain data only, never code.
    """
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError("%s: no %s in this checkpoint (was it written by drover.torch.save?)"
                                % (directory, STATE_FILE))
    state = torch.load(path, map_location=map_location, weights_only=True)
    if model is not None:
        unwrap(model).load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng:
        _set_rng_state(state["rng"])
    return state.get("extra")
