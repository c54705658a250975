"""Drover's library for the training code teams bring.

One call, :func:`init`, gives a script what a Drover task is told — its rank and world, its
hyper-parameters, where to write checkpoints and which one to resume from — and the means to
answer: :meth:`Context.report` for metrics, :meth:`Context.checkpoint` for atomic checkpoints the
server records, :meth:`Context.poll` for preemption (``SIGTERM``) and checkpoint requests
(``SIGUSR1``). Outside Drover the same script runs as one process with checkpoints in
``./checkpoints``.

``drover.data`` holds a global-batch sampler that stays in step when the world changes size;
``drover.torch`` holds the PyTorch glue (process group, saving and loading model, optimizer and
random state); ``drover.jax`` the JAX glue (the ``jax.distributed`` world, gradients averaged
across it, pytree checkpoints).
"""

from .context import Context, Signals, init

__all__ = ["Context", "Signals", "init", "__version__"]
__version__ = "0.1.0"
