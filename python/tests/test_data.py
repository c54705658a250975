"""Global batches: every rank's share of one order, kept across a change of world size."""

import pytest

from drover.data import GlobalBatches, epoch_order


def run(world, steps, state=None, n=100, batch=12, seed=5):
    """The global batches `steps` steps visit with `world` ranks, and the state after them."""
    ranks = [GlobalBatches(n, batch, seed=seed, rank=r, world_size=world) for r in range(world)]
    if state is not None:
        for sampler in ranks:
            sampler.load_state_dict(state)
    batches = [[i for sampler in ranks for i in sampler.next()] for _ in range(steps)]
    return batches, ranks[0].state_dict()


def test_ranks_split_each_global_batch_without_overlap():
    one, _ = run(1, 30)
    three, _ = run(3, 30)
    assert one == three
    sampler = GlobalBatches(100, 12, rank=0, world_size=5)
    assert len(sampler.next()) == 3  # 12 = 3 + 3 + 2 + 2 + 2


def test_the_loss_weights_average_to_one():
    weights = [GlobalBatches(100, 12, rank=r, world_size=5).loss_weight() for r in range(5)]
    assert abs(sum(weights) / 5 - 1.0) < 1e-12
    assert weights[0] == 5 * 3 / 12 and weights[4] == 5 * 2 / 12


def test_a_resize_visits_what_an_unchanged_world_visits():
    whole, _ = run(1, 40)
    first, state = run(2, 13)
    rest, _ = run(3, 27, state=state)
    assert first + rest == whole


def test_epochs_drop_the_partial_batch_and_reshuffle():
    sampler = GlobalBatches(10, 4, seed=1)
    epoch0 = sampler.next() + sampler.next()
    third = sampler.next()
    assert sampler.epoch == 1 and len(set(epoch0)) == 8
    assert third == epoch_order(1, 1, 10)[:4] and epoch0 == epoch_order(1, 0, 10)[:8]
    assert epoch_order(1, 1, 10) != epoch_order(1, 0, 10)


def test_a_different_order_is_refused_on_load():
    state = GlobalBatches(100, 12, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed is 1, this run's is 2"):
        GlobalBatches(100, 12, seed=2).load_state_dict(state)


@pytest.mark.parametrize("args,message", [
    ((10, 0), "global_batch_size must be between 1 and num_samples"),
    ((10, 11), "global_batch_size must be between 1 and num_samples"),
    ((10, 2, 0, 2, 2), "rank 2 is not inside a world of 2"),
    ((10, 2, 0, 0, 3), "a global batch of 2 cannot be split among 3 ranks"),
])
def test_bad_shapes_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        GlobalBatches(*args)
