"""Global batches that survive a change of world size.

Owns the order in which a job visits its training samples. The order is a function of the seed and
the epoch only, and progress is counted in *global* samples, so a job checkpointed by 2 ranks and
resumed by 3 (a resize) visits exactly the samples it would have visited without the resize: each
global batch is split among whatever ranks there are now.
"""

import random

__all__ = ["GlobalBatches"]


def epoch_order(seed, epoch, num_samples):
    """The sample order of ``epoch``: a shuffle seeded by (seed, epoch) alone."""
    order = list(range(num_samples))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


class GlobalBatches:
    """Batches of ``global_batch_size`` sample indices, each split among ``world_size`` ranks.

    ``next()`` returns this rank's indices of the next global batch and advances. Rank ``r`` gets
    the ``r``-th of ``world_size`` nearly equal contiguous parts (the first ``global % world`` ranks
    one sample more); :meth:`loss_weight` says how to weigh a rank's mean loss so that averaging
    over ranks (as DDP does with gradients) gives the mean over the global batch. An epoch's last
    partial global batch is dropped; the next epoch starts a new order.

    ``state_dict()`` / ``load_state_dict()`` carry the position (epoch, samples into it) in a
    checkpoint; loading it with a different ``rank``/``world_size`` is what a resize does.
    """

    def __init__(self, num_samples, global_batch_size, seed=0, rank=0, world_size=1):
        if global_batch_size < 1 or num_samples < global_batch_size:
            raise ValueError("global_batch_size must be between 1 and num_samples (%d), got %d"
                             % (num_samples, global_batch_size))
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError("rank %d is not inside a world of %d" % (rank, world_size))
        if global_batch_size < world_size:
            raise ValueError("a global batch of %d cannot be split among %d ranks"
                             % (global_batch_size, world_size))
        self.num_samples = num_samples
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.position = 0
        self._order = epoch_order(seed, 0, num_samples)

    def _bounds(self, rank):
        base, extra = divmod(self.global_batch_size, self.world_size)
        start = rank * base + min(rank, extra)
        return start, start + base + (1 if rank < extra else 0)

    def loss_weight(self):
        """``world_size * local / global``: multiply this rank's mean loss by it before backward."""
        start, end = self._bounds(self.rank)
        return self.world_size * (end - start) / self.global_batch_size

    def next(self):
        """This rank's sample indices of the next global batch."""
        if self.position + self.global_batch_size > self.num_samples:
            self.epoch += 1
            self.position = 0
            self._order = epoch_order(self.seed, self.epoch, self.num_samples)
        start, end = self._bounds(self.rank)
        batch = self._order[self.position + start:self.position + end]
        self.position += self.global_batch_size
        return batch

    def __iter__(self):
        while True:
            yield self.next()

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "num_samples": self.num_samples, "global_batch_size": self.global_batch_size}

    def load_state_dict(self, state):
        for key in ("seed", "num_samples", "global_batch_size"):
            if state[key] != getattr(self, key):
                raise ValueError("the checkpoint's %s is %r, this run's is %r"
                                 % (key, state[key], getattr(self, key)))
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._order = epoch_order(self.seed, self.epoch, self.num_samples)
