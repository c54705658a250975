"""The task's context: what Drover tells a process (environment) and how it answers (stdout lines).

Owns the command-job contract on the program's side: reading ``DROVER_*`` (and the ``torchrun`` /
``jax.distributed`` variables a launcher sets), writing ``{"drover": ...}`` lines, writing
checkpoints atomically, and turning ``SIGTERM`` / ``SIGUSR1`` into flags a training loop polls.
"""

import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["Context", "Signals", "init"]

#: Name of a finished checkpoint directory: ``step-00001200``.
CHECKPOINT_PREFIX = "step-"
#: The temporary directory a checkpoint is written into before it is renamed.
_TEMP_MARK = ".tmp-"


def _read_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: The process's umask (read once, at import: reading it means setting it).
_UMASK = _read_umask()


class Signals:
    """What the loop should do at this step boundary.

    ``stop``: Drover asked the task to stop (preemption, resize, drain, cancel): checkpoint and return.
    ``checkpoint``: a checkpoint was asked for (``drover checkpoint JOB``): write one and go on.
    """

    __slots__ = ("stop", "checkpoint")

    def __init__(self, stop, checkpoint):
        self.stop = bool(stop)
        self.checkpoint = bool(checkpoint)

    def __repr__(self):
        return "Signals(stop=%r, checkpoint=%r)" % (self.stop, self.checkpoint)


def _int_env(env, name, default=None):
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, raw)) from None


def _load_hparams(env):
    path = env.get("DROVER_HPARAMS_FILE", "")
    if path:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    elif env.get("DROVER_HPARAMS", ""):
        values = json.loads(env["DROVER_HPARAMS"])
    else:
        return {}
    if not isinstance(values, dict):
        raise ValueError("the hyper-parameters are not a JSON object: %r" % (values,))
    return values


def _step_of(name):
    """The step of a finished checkpoint's name, or None for anything else."""
    if not name.startswith(CHECKPOINT_PREFIX) or _TEMP_MARK in name:
        return None
    digits = name[len(CHECKPOINT_PREFIX):].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def _fsync_tree(path):
    """fsync every file below ``path`` and every directory, deepest first."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            _fsync(os.path.join(root, name))
        _fsync(root)


def _fsync(path):
    """fsync a file or a directory (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path):
    """Removes a file or a directory tree; one already gone is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class Context:
    """One process of a Drover task (or a plain run outside Drover). Make it with :func:`init`.

    Attributes:
        job_id, job_name: the job (``"local"`` outside Drover).
        generation: the allocation's generation; every (re)start, resize or move makes a new one.
        rank, world_size: this process among the job's training processes (a PS shard: its index
            among the shards). Under
            ``launcher: torch`` these are ``RANK`` / ``WORLD_SIZE`` (one process per GPU), under
            ``launcher: jax`` ``JAX_PROCESS_ID`` / ``JAX_NUM_PROCESSES``, else the worker's index among
            ``DROVER_NUM_WORKERS``.
        local_rank, local_world_size: this process among its worker's processes (``LOCAL_RANK``).
        role: ``"worker"`` or ``"ps"``.
        is_chief: rank 0 of the workers: the process that reports and writes checkpoints.
        hparams: a trial's hyper-parameters (an empty dict outside an experiment).
        max_steps: the step to stop at when the job declares one (``spec.command.max_steps``; ASHA,
            Hyperband and PBT set it for each trial segment), else None.
        checkpoint_dir: where checkpoints go (``DROVER_CHECKPOINT_DIR``; ``./checkpoints`` outside).
        resume_from: the checkpoint to resume from (a ``Path``), or None on a fresh start.
        resume_step: its step, or None.
        under_drover: whether Drover started this process.
    """

    def __init__(self, env=None, install_signal_handlers=True, stdout_fd=1):
        env = os.environ if env is None else env
        self.under_drover = bool(env.get("DROVER_JOB_ID"))
        self.job_id = env.get("DROVER_JOB_ID") or "local"
        self.job_name = env.get("DROVER_JOB_NAME") or self.job_id
        self.generation = _int_env(env, "DROVER_GENERATION", 0)
        self.role = env.get("DROVER_ROLE") or "worker"
        workers = _int_env(env, "DROVER_NUM_WORKERS", 1)
        if env.get("RANK", "") != "" and env.get("WORLD_SIZE", "") != "":
            self.rank = _int_env(env, "RANK")
            self.world_size = _int_env(env, "WORLD_SIZE")
            self.local_rank = _int_env(env, "LOCAL_RANK", 0)
            self.local_world_size = _int_env(env, "LOCAL_WORLD_SIZE", 1)
        elif env.get("JAX_PROCESS_ID", "") != "":
            self.rank = _int_env(env, "JAX_PROCESS_ID")
            self.world_size = _int_env(env, "JAX_NUM_PROCESSES", 1)
            self.local_rank, self.local_world_size = 0, 1
        elif self.role == "ps":
            self.rank = _int_env(env, "DROVER_TASK_INDEX", 0)
            self.world_size = _int_env(env, "DROVER_NUM_PS", 1)
            self.local_rank, self.local_world_size = 0, 1
        else:
            self.rank = _int_env(env, "DROVER_TASK_INDEX", _int_env(env, "DROVER_RANK", 0))
            self.world_size = workers
            self.local_rank, self.local_world_size = 0, 1
        if self.world_size < 1 or not 0 <= self.rank < max(self.world_size, 1):
            raise ValueError("rank %d is not inside a world of %d" % (self.rank, self.world_size))
        self.is_chief = self.role == "worker" and self.rank == 0
        self.hparams = _load_hparams(env)
        self.max_steps = _int_env(env, "DROVER_MAX_STEPS", None)
        self.checkpoint_dir = Path(env.get("DROVER_CHECKPOINT_DIR") or "checkpoints").absolute()
        resume = env.get("DROVER_RESUME_FROM", "")
        self.resume_from = Path(resume) if resume else None
        self.resume_step = _int_env(env, "DROVER_RESUME_STEP", None) if resume else None
        if self.resume_from is not None and self.resume_step is None:
            self.resume_step = _step_of(self.resume_from.name)
        self._stdout_fd = stdout_fd
        self._stop = threading.Event()
        self._checkpoint = threading.Event()
        self._on_checkpoint_request = None
        self._agree = None  # set by drover.torch.init_process_group: flags agreed by every rank
        self._last_checkpoint = None
        self._last_report = None  # (step, time.monotonic()) of the previous report
        if self.resume_from is not None and self.resume_from.parent == self.checkpoint_dir:
            # Resuming from this very directory: its step is written and recorded already.
            self._last_checkpoint = self.resume_step
        if self.is_chief:
            self._clean_temporaries()
        if install_signal_handlers:
            self._install_signal_handlers()

    def __repr__(self):
        return "Context(job=%s, generation=%d, rank=%d of %d, resume_step=%s)" % (
            self.job_id, self.generation, self.rank, self.world_size, self.resume_step)

    # --- hyper-parameters ---------------------------------------------------------------------

    def hparam(self, name, default=None):
        """A trial's hyper-parameter, or ``default`` when the job is not a trial or lacks it."""
        return self.hparams.get(name, default)

    # --- signals ------------------------------------------------------------------------------

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("drover.init() installs signal handlers: call it from the main thread "
                               "(or pass install_signal_handlers=False and call request_stop() yourself)")
        signal.signal(signal.SIGTERM, lambda signum, frame: self.request_stop())
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.request_checkpoint())

    def request_stop(self):
        """What ``SIGTERM`` does: the next :meth:`poll` says stop."""
        self._stop.set()

    def request_checkpoint(self):
        """What ``SIGUSR1`` does: the next :meth:`poll` says checkpoint (until one is written)."""
        self._checkpoint.set()
        callback = self._on_checkpoint_request
        if callback is not None:
            callback()

    def on_checkpoint_request(self, callback):
        """Calls ``callback()`` (in the signal handler: keep it short) when a checkpoint is asked for."""
        self._on_checkpoint_request = callback

    @property
    def preempted(self):
        """This process was asked to stop (no agreement with other ranks: see :meth:`poll`)."""
        return self._stop.is_set()

    def poll(self):
        """The signals at this step boundary, as :class:`Signals`.

        With a process group attached (``drover.torch.init_process_group``) the answer is agreed by
        every rank — a flag any rank saw counts for all — so every rank must call ``poll`` at the same
        point of every step, as it would a collective. Without one it is this process's own flags.
        """
        stop, checkpoint = self._stop.is_set(), self._checkpoint.is_set()
        if self._agree is not None:
            stop, checkpoint = self._agree(stop, checkpoint)
        return Signals(stop, checkpoint)

    def should_stop(self):
        """``poll().stop``: whether to checkpoint and return now (a collective, as :meth:`poll`)."""
        return self.poll().stop

    # --- metrics ------------------------------------------------------------------------------

    def report(self, step, values=None, **metrics):
        """Reports metrics at ``step`` (the chief's are recorded; other ranks' calls do nothing).

        ``ctx.report(300, loss=0.5, accuracy=0.93)`` or ``ctx.report(300, {"loss": 0.5})``. Values
        must be finite numbers: a NaN or infinity is a ``ValueError`` naming the metric. Unless given,
        ``step_time_ms`` is added: the wall time per step since this process's previous report.
        With ``loss`` it is what Drover's speed and convergence models learn a job from (the
        scheduler's allocations and resizes, the queue's predictions).
        """
        if values:
            metrics = dict(values, **metrics)
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError("step must be a non-negative integer, got %r" % (step,))
        clean = {}
        for name, value in metrics.items():
            if not isinstance(name, str) or not name:
                raise ValueError("metric names must be non-empty strings, got %r" % (name,))
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError("metric %s=%r is not a number" % (name, value)) from None
            if not math.isfinite(number):
                raise ValueError("metric %s=%r is not finite" % (name, number))
            clean[name] = number
        now = time.monotonic()
        last, self._last_report = self._last_report, (step, now)
        if "step_time_ms" not in clean and last is not None and step > last[0]:
            clean["step_time_ms"] = (now - last[1]) * 1000.0 / (step - last[0])
        if not self.is_chief:
            return
        self._say({"drover": "metrics", "step": step, "values": clean})

    def _say(self, obj):
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        # What the program printed before comes first in the log, then this line, whole.
        sys.stdout.flush()
        view = memoryview(line)
        while view:
            view = view[os.write(self._stdout_fd, view):]

    # --- checkpoints --------------------------------------------------------------------------

    def _clean_temporaries(self):
        """Removes checkpoints a killed writer left half-written."""
        try:
            names = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith("." + CHECKPOINT_PREFIX) and _TEMP_MARK in name:
                _remove(self.checkpoint_dir / name)

    def checkpoints(self):
        """The finished checkpoints in ``checkpoint_dir``, as ``(step, path)`` oldest first."""
        try:
            names = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return []
        found = ((_step_of(name), self.checkpoint_dir / name) for name in names)
        return sorted((step, path) for step, path in found if step is not None)

    def checkpoint(self, step, keep_last=None):
        """Writes the checkpoint of ``step``: ``with ctx.checkpoint(step) as path: ...``.

        On the chief ``path`` is an empty directory to write files into; when the block ends without
        an exception the files are fsynced, the directory renamed to ``step-<step>`` in one step and
        announced to Drover, which records it (a restarted job resumes from the latest record). An
        exception leaves nothing behind. On other ranks, and for a step already checkpointed,
        ``path`` is None: write nothing. ``keep_last`` then removes all but that many of the
        checkpoints in ``checkpoint_dir`` (this generation's).
        """
        return self._write(step, keep_last, None)

    def checkpoint_file(self, step, suffix="", keep_last=None):
        """As :meth:`checkpoint`, for a checkpoint that is one file: ``path`` is a file to create,
        renamed to ``step-<step><suffix>`` (``suffix=".json"``) when the block ends."""
        if "/" in suffix or "\\" in suffix:
            raise ValueError("suffix must not name a directory, got %r" % (suffix,))
        return self._write(step, keep_last, suffix)

    @contextlib.contextmanager
    def _write(self, step, keep_last, suffix):
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError("step must be a non-negative integer, got %r" % (step,))
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError("keep_last must be a positive integer, got %r" % (keep_last,))
        if not self.is_chief or step == self._last_checkpoint:
            self._checkpoint.clear()
            yield None
            return
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        name = "%s%08d%s" % (CHECKPOINT_PREFIX, step, suffix or "")
        prefix = ".%s%s%d-" % (name, _TEMP_MARK, os.getpid())
        # mkdtemp/mkstemp make it private to this process's user; the job's later tasks (each of a
        # sandbox's tasks is a user of its own, in the job's group) must read it: the usual modes.
        if suffix is None:
            temp = Path(tempfile.mkdtemp(prefix=prefix, dir=self.checkpoint_dir))
            os.chmod(temp, 0o777 & ~_UMASK)
        else:
            fd, temp = tempfile.mkstemp(prefix=prefix, dir=self.checkpoint_dir)
            os.fchmod(fd, 0o666 & ~_UMASK)
            os.close(fd)
            temp = Path(temp)
        try:
            yield temp
            if suffix is None:
                _fsync_tree(temp)
            else:
                _fsync(temp)
            final = self.checkpoint_dir / name
            if final.is_dir():  # written by an earlier process of this generation: replace it
                shutil.rmtree(final)
            os.replace(temp, final)
            _fsync(self.checkpoint_dir)
        except BaseException:
            _remove(temp)
            raise
        self._last_checkpoint = step
        self._checkpoint.clear()
        self._say({"drover": "checkpoint", "step": step, "path": name})
        if keep_last is not None:
            for _, old in self.checkpoints()[:-keep_last]:
                _remove(old)


_context = None


def init(install_signal_handlers=True):
    """The context of this process, made on the first call (later calls return the same one).

    Reads the environment Drover gives a task, removes half-written checkpoints a killed chief left,
    and handles ``SIGTERM`` (stop) and ``SIGUSR1`` (checkpoint) by setting flags that
    :meth:`Context.poll` returns.
    """
    global _context
    if _context is None:
        _context = Context(install_signal_handlers=install_signal_handlers)
    return _context
