//! The random searcher and the seeded generators every searcher draws from: each trial's choices come
//! from a generator seeded by the experiment's seed, the trial's index and a stream number.

use crate::space;
use drover_core::experiment::{Assignment, ExperimentSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator for one trial's choices: the same seed and index always draw the same numbers.
pub fn trial_rng(seed: u64, trial: u32, stream: u32) -> ChaCha8Rng {
    // Each word is mixed in after the previous one is scrambled, so (seed, trial) pairs never collide the
    // way `seed ^ trial` would.
    let mut key = splitmix(seed);
    for word in [u64::from(trial), u64::from(stream)] {
        key = splitmix(key.wrapping_add(splitmix(word.wrapping_add(1))));
    }
    ChaCha8Rng::seed_from_u64(key)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A point drawn uniformly for trial `index`.
pub fn random_point(spec: &ExperimentSpec, index: u32) -> Assignment {
    let dims = space::dims(&spec.parameters);
    space::sample(&dims, &mut trial_rng(spec.seed, index, 0))
}
