"""JAX glue: the job's ``jax.distributed`` world, gradients averaged across it, and checkpoints.

Owns what a JAX script needs beyond :mod:`drover.context`: joining the world of a ``launcher: jax``
job (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``; CPU collectives
over gloo when there is no GPU), averaging a pytree across processes, agreeing on stop/checkpoint
signals, and saving/loading pytrees of arrays (parameters, optimizer state) with NumPy, no other
dependency.
"""

import json
import os
import signal
import threading
from pathlib import Path

try:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
except ModuleNotFoundError as err:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError("drover.jax needs JAX: pip install jax (or './python[jax]')",
                              name=err.name) from err

__all__ = ["initialize", "shutdown", "mean_across", "save", "load", "STATE_FILE"]

#: The file :func:`save` writes inside a checkpoint directory.
STATE_FILE = "state.npz"


def initialize(ctx, timeout_s=600):
    """Joins the job's ``jax.distributed`` world when it has more than one process.

    Collectives of CPU arrays go over gloo (JAX's CPU default has none across processes; GPU
    arrays use NCCL as always). Afterwards ``ctx.poll()`` is agreed by every process.
    """
    if ctx.world_size <= 1:
        return
    address = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if not address:
        raise RuntimeError("a world of %d processes without JAX_COORDINATOR_ADDRESS: give the job "
                           "spec.distributed.launcher: jax" % ctx.world_size)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # jax.distributed installs a SIGTERM handler of its own (its preemption notifier), which would
    # swallow Drover's stop: the script's own handler (drover.init's) is put back afterwards.
    handler = signal.getsignal(signal.SIGTERM)
    jax.distributed.initialize(coordinator_address=address, num_processes=ctx.world_size,
                               process_id=ctx.rank, initialization_timeout=timeout_s)
    if callable(handler) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)

    def agree(stop, checkpoint):
        flags = multihost_utils.process_allgather(np.array([int(stop), int(checkpoint)], np.int32))
        both = np.asarray(flags).reshape(-1, 2).max(axis=0)
        return bool(both[0]), bool(both[1])

    ctx._agree = agree


def shutdown():
    """Leaves the world (if one was joined): call it before the script returns."""
    if jax.process_count() > 1:
        jax.distributed.shutdown()


def mean_across(tree):
    """The mean of ``tree`` (a pytree of arrays, e.g. gradients) over every process of the job.

    Each process passes its own; every process gets the same mean. One process: ``tree`` itself.
    """
    if jax.process_count() == 1:
        return tree
    gathered = multihost_utils.process_allgather(tree)
    return jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), gathered)


def save(directory, tree, extra=None):
    """Writes ``state.npz`` into ``directory`` (the path ``ctx.checkpoint(step)`` gave the chief):
    every leaf of ``tree`` as a NumPy array (in the tree's flattening order) and ``extra`` (plain
    data: step, sampler state, ...) as JSON."""
    leaves = jax.tree_util.tree_leaves(tree)
    arrays = {"leaf_%05d" % i: np.asarray(leaf) for i, leaf in enumerate(leaves)}
    arrays["extra"] = np.frombuffer(json.dumps(extra).encode(), dtype=np.uint8)
    with open(Path(directory) / STATE_FILE, "wb") as f:
        np.savez(f, **arrays)


def load(directory, like):
    """What :func:`save` wrote, shaped like ``like`` (a pytree of the same structure): returns
    ``(tree, extra)``. Nothing but arrays is read (``allow_pickle=False``)."""
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError("%s: no %s in this checkpoint (was it written by drover.jax.save?)"
                                % (directory, STATE_FILE))
    with np.load(path, allow_pickle=False) as data:
        leaves, structure = jax.tree_util.tree_flatten(like)
        names = sorted(k for k in data.files if k.startswith("leaf_"))
        if len(names) != len(leaves):
            raise ValueError("%s holds %d arrays, the tree has %d leaves"
                             % (path, len(names), len(leaves)))
        loaded = [jnp.asarray(data[name], dtype=np.asarray(leaf).dtype)
                  for name, leaf in zip(names, leaves)]
        extra = json.loads(bytes(data["extra"]).decode())
    return jax.tree_util.tree_unflatten(structure, loaded), extra
