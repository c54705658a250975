"""The context: what it reads from the environment, the lines it writes, its checkpoints."""

import json
import os
import signal
import subprocess
import textwrap

import pytest

from drover.context import Context


def make(env, tmp_path=None, **kw):
    """A Context over a pipe instead of stdout; returns it and a function that reads what it wrote."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    ctx = Context(env=env, install_signal_handlers=False, stdout_fd=write_fd, **kw)

    def lines():
        try:
            data = os.read(read_fd, 1 << 20)
        except BlockingIOError:
            return []
        return [json.loads(line) for line in data.decode().splitlines()]

    return ctx, lines


def drover_env(tmp_path, **extra):
    env = {"DROVER_JOB_ID": "j-1", "DROVER_JOB_NAME": "digits", "DROVER_GENERATION": "3",
           "DROVER_ROLE": "worker", "DROVER_TASK_INDEX": "0", "DROVER_RANK": "0",
           "DROVER_WORLD_SIZE": "2", "DROVER_NUM_WORKERS": "2", "DROVER_NUM_PS": "0",
           "DROVER_CHECKPOINT_DIR": str(tmp_path / "ckpt")}
    env.update(extra)
    return env


def test_outside_drover_one_process_with_local_checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx, _ = make({})
    assert (ctx.job_id, ctx.generation, ctx.rank, ctx.world_size) == ("local", 0, 0, 1)
    assert ctx.is_chief and not ctx.under_drover
    assert ctx.checkpoint_dir == tmp_path / "checkpoints"
    assert ctx.resume_from is None and ctx.resume_step is None and ctx.hparams == {}


def test_drover_variables(tmp_path):
    ctx, _ = make(drover_env(tmp_path, DROVER_TASK_INDEX="1", DROVER_RANK="1",
                             DROVER_RESUME_FROM="/store/j-1/2/step-00000600",
                             DROVER_RESUME_STEP="600"))
    assert ctx.under_drover and ctx.job_id == "j-1" and ctx.job_name == "digits"
    assert (ctx.generation, ctx.rank, ctx.world_size, ctx.is_chief) == (3, 1, 2, False)
    assert str(ctx.resume_from) == "/store/j-1/2/step-00000600" and ctx.resume_step == 600


def test_the_step_budget(tmp_path):
    ctx, _ = make(drover_env(tmp_path, DROVER_MAX_STEPS="900"))
    assert ctx.max_steps == 900
    ctx, _ = make(drover_env(tmp_path))
    assert ctx.max_steps is None


def test_a_resume_step_missing_from_the_environment_is_read_from_the_name(tmp_path):
    ctx, _ = make(drover_env(tmp_path, DROVER_RESUME_FROM="/s/step-00000042"))
    assert ctx.resume_step == 42


def test_torch_launcher_ranks_are_processes(tmp_path):
    ctx, _ = make(drover_env(tmp_path, DROVER_TASK_INDEX="1", RANK="3", WORLD_SIZE="4",
                             LOCAL_RANK="1", LOCAL_WORLD_SIZE="2"))
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (3, 4, 1, 2)
    assert not ctx.is_chief


def test_jax_launcher(tmp_path):
    ctx, _ = make(drover_env(tmp_path, JAX_PROCESS_ID="0", JAX_NUM_PROCESSES="2"))
    assert (ctx.rank, ctx.world_size, ctx.is_chief) == (0, 2, True)


def test_a_ps_shard_is_never_the_chief(tmp_path):
    ctx, _ = make(drover_env(tmp_path, DROVER_ROLE="ps", DROVER_TASK_INDEX="1", DROVER_RANK="3",
                             DROVER_NUM_PS="2", DROVER_NUM_WORKERS="1"))
    assert (ctx.role, ctx.rank, ctx.world_size, ctx.is_chief) == ("ps", 1, 2, False)


def test_a_bad_variable_is_named(tmp_path):
    with pytest.raises(ValueError, match="DROVER_GENERATION='x' is not an integer"):
        make(drover_env(tmp_path, DROVER_GENERATION="x"))
    with pytest.raises(ValueError, match="rank 5 is not inside a world of 2"):
        make(drover_env(tmp_path, DROVER_TASK_INDEX="5"))


def test_hyper_parameters_from_the_file_first(tmp_path):
    path = tmp_path / "hp.json"
    path.write_text('{"lr": 0.1, "layers": 3}')
    ctx, _ = make(drover_env(tmp_path, DROVER_HPARAMS_FILE=str(path), DROVER_HPARAMS='{"lr": 9}'))
    assert ctx.hparams == {"lr": 0.1, "layers": 3}
    assert ctx.hparam("lr") == 0.1 and ctx.hparam("missing", 7) == 7
    ctx, _ = make(drover_env(tmp_path, DROVER_HPARAMS='{"lr": 9}'))
    assert ctx.hparam("lr") == 9
    with pytest.raises(ValueError, match="not a JSON object"):
        make(drover_env(tmp_path, DROVER_HPARAMS="[1]"))


def test_the_chief_reports_one_line_per_call(tmp_path):
    ctx, lines = make(drover_env(tmp_path))
    ctx.report(300, loss=0.5, accuracy=1)
    ctx.report(302, {"loss": 0.25})
    ctx.report(303, loss=0.2, step_time_ms=7)
    first, second, third = lines()
    assert first == {"drover": "metrics", "step": 300, "values": {"loss": 0.5, "accuracy": 1.0}}
    # From the second report on, the time per step since the previous one is added.
    step_time = second["values"].pop("step_time_ms")
    assert second == {"drover": "metrics", "step": 302, "values": {"loss": 0.25}}
    assert 0 <= step_time < 1000
    assert third["values"] == {"loss": 0.2, "step_time_ms": 7.0}


def test_other_ranks_report_nothing_but_are_checked_alike(tmp_path):
    ctx, lines = make(drover_env(tmp_path, DROVER_TASK_INDEX="1"))
    ctx.report(1, loss=0.5)
    assert lines() == []
    with pytest.raises(ValueError, match="metric loss=nan is not finite"):
        ctx.report(1, loss=float("nan"))


@pytest.mark.parametrize("step,metrics,message", [
    (1, {"loss": float("inf")}, "metric loss=inf is not finite"),
    (1, {"loss": "low"}, "metric loss='low' is not a number"),
    (-1, {"loss": 1.0}, "step must be a non-negative integer"),
    (1.5, {"loss": 1.0}, "step must be a non-negative integer"),
])
def test_bad_reports_are_refused_with_the_reason(tmp_path, step, metrics, message):
    ctx, lines = make(drover_env(tmp_path))
    with pytest.raises(ValueError, match=message):
        ctx.report(step, **metrics)
    assert lines() == []


def test_a_checkpoint_is_renamed_whole_and_announced(tmp_path):
    ctx, lines = make(drover_env(tmp_path))
    with ctx.checkpoint(12) as path:
        assert path.parent == ctx.checkpoint_dir and path.name.startswith(".step-00000012.tmp-")
        (path / "model.bin").write_bytes(b"weights")
        (path / "sub").mkdir()
        (path / "sub" / "opt.bin").write_bytes(b"moments")
    final = ctx.checkpoint_dir / "step-00000012"
    assert (final / "model.bin").read_bytes() == b"weights"
    assert (final / "sub" / "opt.bin").read_bytes() == b"moments"
    assert sorted(os.listdir(ctx.checkpoint_dir)) == ["step-00000012"]
    assert lines() == [{"drover": "checkpoint", "step": 12, "path": "step-00000012"}]
    assert ctx.checkpoints() == [(12, final)]
    # Readable by the job's other users (a later generation's tasks), as files made by open() are.
    umask = os.umask(0)
    os.umask(umask)
    assert final.stat().st_mode & 0o777 == 0o777 & ~umask


def test_a_checkpoint_of_one_file(tmp_path):
    ctx, lines = make(drover_env(tmp_path))
    with ctx.checkpoint_file(30, suffix=".json") as path:
        assert path.name.startswith(".step-00000030.json.tmp-")
        path.write_text("{}")
    assert (ctx.checkpoint_dir / "step-00000030.json").read_text() == "{}"
    assert lines() == [{"drover": "checkpoint", "step": 30, "path": "step-00000030.json"}]
    assert ctx.checkpoints() == [(30, ctx.checkpoint_dir / "step-00000030.json")]
    umask = os.umask(0)
    os.umask(umask)
    assert (ctx.checkpoint_dir / "step-00000030.json").stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(ValueError, match="suffix must not name a directory"):
        with ctx.checkpoint_file(31, suffix="/x"):
            pass
    with pytest.raises(RuntimeError):
        with ctx.checkpoint_file(32, suffix=".json") as path:
            path.write_text("half")
            raise RuntimeError("killed")
    assert sorted(os.listdir(ctx.checkpoint_dir)) == ["step-00000030.json"]


def test_a_failed_checkpoint_leaves_nothing(tmp_path):
    ctx, lines = make(drover_env(tmp_path))
    with pytest.raises(OSError):
        with ctx.checkpoint(5) as path:
            (path / "half").write_bytes(b"x")
            raise OSError("disk full")
    assert os.listdir(ctx.checkpoint_dir) == [] and lines() == []


def test_other_ranks_and_repeated_steps_write_nothing(tmp_path):
    ctx, lines = make(drover_env(tmp_path, DROVER_TASK_INDEX="1"))
    with ctx.checkpoint(5) as path:
        assert path is None
    chief, chief_lines = make(drover_env(tmp_path))
    with chief.checkpoint(5) as path:
        (path / "a").write_bytes(b"1")
    with chief.checkpoint(5) as path:
        assert path is None
    assert len(chief_lines()) == 1 and lines() == []


def test_resuming_from_this_directory_does_not_rewrite_that_step(tmp_path):
    first, _ = make(drover_env(tmp_path))
    with first.checkpoint(7) as path:
        (path / "a").write_bytes(b"1")
    resume = str(first.checkpoint_dir / "step-00000007")
    ctx, lines = make(drover_env(tmp_path, DROVER_RESUME_FROM=resume))
    with ctx.checkpoint(7) as path:
        assert path is None
    assert lines() == []


def test_keep_last_prunes_older_checkpoints(tmp_path):
    ctx, _ = make(drover_env(tmp_path))
    for step in (1, 2, 3, 4):
        with ctx.checkpoint(step, keep_last=2) as path:
            (path / "a").write_bytes(b"%d" % step)
    assert [step for step, _ in ctx.checkpoints()] == [3, 4]


def test_a_killed_writers_temporaries_are_removed_at_start(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / ".step-00000009.tmp-123-abc").mkdir(parents=True)
    (ckpt / ".step-00000009.tmp-123-abc" / "half").write_bytes(b"x")
    (ckpt / "step-00000008").mkdir()
    make(drover_env(tmp_path, DROVER_TASK_INDEX="1"))  # not the chief: leaves them
    assert len(os.listdir(ckpt)) == 2
    make(drover_env(tmp_path))
    assert os.listdir(ckpt) == ["step-00000008"]


def test_the_request_flags(tmp_path):
    ctx, _ = make(drover_env(tmp_path))
    asked = []
    ctx.on_checkpoint_request(lambda: asked.append(1))
    assert (ctx.poll().stop, ctx.poll().checkpoint) == (False, False)
    ctx.request_checkpoint()
    assert ctx.poll().checkpoint and asked == [1]
    with ctx.checkpoint(1) as path:
        (path / "a").write_bytes(b"1")
    assert not ctx.poll().checkpoint
    assert not ctx.should_stop()
    ctx.request_stop()
    assert ctx.poll().stop and ctx.preempted and ctx.should_stop()


LOOP = textwrap.dedent("""
    import sys, time, drover
    ctx = drover.init()
    print("ready", flush=True)
    step = 0
    while True:
        step += 1
        time.sleep(0.01)
        signals = ctx.poll()
        if signals.stop or signals.checkpoint:
            with ctx.checkpoint(step) as path:
                (path / "state").write_text(str(step))
        if signals.stop:
            print("stopped at", step, flush=True)
            sys.exit(0)
""")


def test_sigusr1_checkpoints_and_goes_on_sigterm_checkpoints_and_exits(tmp_path, child_env, python):
    child = subprocess.Popen([python, "-c", LOOP], env=child_env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGUSR1)
        first = json.loads(child.stdout.readline())
        assert first["drover"] == "checkpoint"
        child.send_signal(signal.SIGTERM)
        second = json.loads(child.stdout.readline())
        assert second["drover"] == "checkpoint" and second["step"] > first["step"]
        assert child.stdout.readline() == "stopped at %d\n" % second["step"]
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    ckpt = tmp_path / "ckpt"
    assert sorted(os.listdir(ckpt)) == ["step-%08d" % first["step"], "step-%08d" % second["step"]]


def test_init_from_another_thread_says_what_to_do(child_env, python):
    code = ("import threading, drover\n"
            "def run():\n"
            "    try:\n"
            "        drover.init()\n"
            "    except RuntimeError as e:\n"
            "        print(e)\n"
            "t = threading.Thread(target=run); t.start(); t.join()\n")
    out = subprocess.run([python, "-c", code], env=child_env, capture_output=True, text=True, check=True)
    assert "call it from the main thread" in out.stdout
