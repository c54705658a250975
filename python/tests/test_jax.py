"""drover.jax: pytree checkpoints that resume exactly, and gradients averaged across processes."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install './python[jax]')")
import jax.numpy as jnp  # noqa: E402

import drover.jax as dj  # noqa: E402


def tree():
    return {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3, jnp.float32),
            "t": jnp.asarray(7, jnp.int32)}


def test_a_saved_tree_loads_back_with_its_extra_and_dtypes(tmp_path):
    saved = tree()
    dj.save(tmp_path, saved, extra={"step": 9, "batches": {"epoch": 1}})
    like = jax.tree_util.tree_map(jnp.zeros_like, saved)
    loaded, extra = dj.load(tmp_path, like)
    assert extra == {"step": 9, "batches": {"epoch": 1}}
    for a, b in zip(jax.tree_util.tree_leaves(saved), jax.tree_util.tree_leaves(loaded)):
        assert a.dtype == b.dtype and bool(jnp.all(a == b))


def test_a_tree_of_another_shape_or_no_checkpoint_is_refused(tmp_path):
    dj.save(tmp_path, tree())
    with pytest.raises(ValueError, match="holds 3 arrays"):
        dj.load(tmp_path, {"only": jnp.zeros(1)})
    with pytest.raises(FileNotFoundError, match="drover.jax.save"):
        dj.load(tmp_path / "nowhere", tree())


def test_one_process_is_its_own_mean_and_needs_no_world():
    class Ctx:
        world_size, rank, _agree = 1, 0, None
    ctx = Ctx()
    dj.initialize(ctx)
    assert ctx._agree is None
    grads = {"g": jnp.ones(2)}
    assert dj.mean_across(grads) is grads


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_average_their_gradients_and_agree_on_signals(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import os
        import jax.numpy as jnp
        import drover
        import drover.jax as dj
        import signal
        ctx = drover.init()
        dj.initialize(ctx)
        mean = dj.mean_across({"g": jnp.full(2, float(ctx.rank + 1))})
        if ctx.rank == 1:
            # Drover's stop reaches the script, not jax.distributed's own SIGTERM handler.
            os.kill(os.getpid(), signal.SIGTERM)
        signals = ctx.poll()
        print("mean", float(mean["g"][0]), "stop", signals.stop, flush=True)
        dj.shutdown()
    """))
    port = free_port()
    library = os.path.join(os.path.dirname(__file__), "..", "src")
    procs = []
    for rank in range(2):
        env = dict(os.environ, JAX_COORDINATOR_ADDRESS="127.0.0.1:%d" % port, JAX_NUM_PROCESSES="2",
                   JAX_PROCESS_ID=str(rank), PYTHONPATH=library,
                   DROVER_CHECKPOINT_DIR=str(tmp_path / "ck"))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out
        assert "mean 1.5 stop True" in out, out
