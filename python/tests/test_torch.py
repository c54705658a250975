"""drover.torch: exact resume through save/load, and signals agreed across a process group."""

import os
import socket
import subprocess
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install './python[torch]')")
import drover.torch as dt  # noqa: E402


def build():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, steps):
    for _ in range(steps):
        x = torch.randn(32, 8)  # the data come from the generator too: it must be restored
        y = torch.randint(0, 3, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def test_a_resumed_run_ends_bit_for_bit_where_an_unbroken_one_does(tmp_path):
    torch.manual_seed(0)
    model, optimizer, scheduler = build()
    train(model, optimizer, scheduler, 20)
    unbroken = [p.detach().clone() for p in model.parameters()]

    torch.manual_seed(0)
    model, optimizer, scheduler = build()
    train(model, optimizer, scheduler, 9)
    dt.save(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler, extra={"step": 9})
    torch.manual_seed(123)  # a new process: other weights, other generator state
    model, optimizer, scheduler = build()
    assert dt.load(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler) == {"step": 9}
    train(model, optimizer, scheduler, 11)
    for a, b in zip(unbroken, model.parameters()):
        assert torch.equal(a, b)


def test_numpy_random_state_is_kept(tmp_path):
    numpy = pytest.importorskip("numpy", reason="NumPy is not installed")
    numpy.random.seed(4)
    dt.save(tmp_path)
    expected = numpy.random.rand(3)
    numpy.random.seed(99)
    dt.load(tmp_path)
    assert (numpy.random.rand(3) == expected).all()


def test_unwrap_finds_the_module_inside_wrappers():
    inner = torch.nn.Linear(2, 2)

    class Wrapper(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert dt.unwrap(Wrapper(Wrapper(inner))) is inner
    empty = torch.nn.Sequential()
    assert dt.unwrap(Wrapper(empty)) is empty


def test_loading_a_checkpoint_without_state_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no state.pt in this checkpoint"):
        dt.load(tmp_path)


def test_a_world_without_the_torch_launcher_is_refused(tmp_path):
    from drover.context import Context
    ctx = Context(env={"DROVER_JOB_ID": "j", "DROVER_NUM_WORKERS": "2", "DROVER_TASK_INDEX": "0",
                       "DROVER_CHECKPOINT_DIR": str(tmp_path)}, install_signal_handlers=False)
    saved = {k: os.environ.pop(k) for k in ("MASTER_ADDR", "MASTER_PORT") if k in os.environ}
    try:
        with pytest.raises(RuntimeError, match="spec.distributed.launcher: torch"):
            dt.init_process_group(ctx)
    finally:
        os.environ.update(saved)


RANK = textwrap.dedent("""
    import os, drover, drover.torch as dt
    ctx = drover.init()
    dt.init_process_group(ctx)
    # Rank 1 alone is asked to stop and rank 0 alone to checkpoint: both must see both.
    if ctx.rank == 1:
        ctx.request_stop()
    else:
        ctx.request_checkpoint()
    signals = ctx.poll()
    print(ctx.rank, signals.stop, signals.checkpoint, flush=True)
    # Leaving the group before exiting: a rank that exits inside it may abort in gloo's teardown
    # ("terminate called without an active exception") when its peer has gone first.
    dt.shutdown()
""")


def test_poll_is_agreed_by_every_rank(child_env, python):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    children = []
    for rank in range(2):
        env = dict(child_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", DROVER_JOB_ID="j")
        children.append(subprocess.Popen([python, "-c", RANK], env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True))
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0, err
    assert sorted(out for out, _ in outputs) == ["0 True True\n", "1 True True\n"]
