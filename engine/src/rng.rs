//! The engine's own random numbers: xoshiro256** seeded through SplitMix64. Its whole state is four
//! `u64`s that go into every checkpoint, so a resumed run draws exactly the numbers an uninterrupted run
//! would (candle's CPU generator cannot be seeded, so the engine never uses it).

/// A seedable, checkpointable generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn seed(seed: u64) -> Self {
        let mut x = seed;
        Self {
            state: [
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
            ],
        }
    }

    /// A generator for one purpose, independent of others drawn from the same seed
    /// (`stream` names the purpose: initialisation, dropout, the data order of an epoch).
    pub fn derive(seed: u64, stream: u64) -> Self {
        Self::seed(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(17))
    }

    pub fn from_state(state: [u64; 4]) -> Self {
        Self { state }
    }

    pub fn state(&self) -> [u64; 4] {
        self.state
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in [low, high).
    pub fn uniform_in(&mut self, low: f32, high: f32) -> f32 {
        low + (high - low) * self.uniform()
    }

    /// Standard normal (Box–Muller; one draw per call, so the state stays four words).
    pub fn normal(&mut self) -> f32 {
        let u1 = ((self.next_u64() >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64);
        let u2 = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// Uniform in `0..n` (n > 0), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_state_continues_the_same_sequence() {
        let mut a = Rng::seed(7);
        for _ in 0..100 {
            a.next_u64();
        }
        let mut b = Rng::from_state(a.state());
        let from_a: Vec<u64> = (0..10).map(|_| a.next_u64()).collect();
        let from_b: Vec<u64> = (0..10).map(|_| b.next_u64()).collect();
        assert_eq!(from_a, from_b);
        assert_ne!(Rng::seed(1).next_u64(), Rng::seed(2).next_u64());
    }

    #[test]
    fn draws_have_the_right_moments() {
        let mut rng = Rng::seed(3);
        let n = 200_000;
        let normals: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
        let mean = normals.iter().sum::<f32>() / n as f32;
        let var = normals.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n as f32;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        let uniform: f32 = (0..n).map(|_| rng.uniform()).sum::<f32>() / n as f32;
        assert!((uniform - 0.5).abs() < 0.01);
        let mut order: Vec<u32> = (0..10).collect();
        rng.shuffle(&mut order);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    }
}
