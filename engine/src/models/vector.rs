//! Elementwise loops at the host's best vector width, and the approximations that let them vectorise.
//!
//! The build targets baseline x86-64 (SSE2). [`vectorised!`] runs a loop compiled again for the CPU's
//! extensions (AVX2 and FMA, x86-64-v3), chosen at run time by pulp's dispatch, which gemm already
//! uses for its kernels. The bits come out the same on every path: nothing here lets the compiler
//! reorder a sum or fuse a multiply-add, so a wider vector only does the same operations at once.

/// Defines a function whose body runs compiled for the best instruction set this CPU has (pulp's
/// dispatch). The body becomes the `#[inline(always)]` method of a `pulp::WithSimd` impl, so it is
/// compiled inside pulp's feature-enabled wrappers (a closure would be a function of its own, compiled
/// for the baseline). What the body calls must be `#[inline(always)]` too, or small enough that the
/// compiler inlines it, to vectorise with it. Every argument's type names the lifetime given.
macro_rules! vectorised {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$lt:lifetime>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?
        $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name<$lt>($($arg: $ty),*) $(-> $ret)? {
            struct Kernel<$lt> {
                $($arg: $ty),*
            }
            impl<$lt> pulp::WithSimd for Kernel<$lt> {
                type Output = $crate::models::vector::vectorised!(@output $($ret)?);
                #[inline(always)]
                fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
                    let Kernel { $($arg),* } = self;
                    $body
                }
            }
            pulp::Arch::new().dispatch(Kernel { $($arg),* })
        }
    };
    (@output) => { () };
    (@output $ret:ty) => { $ret };
}
pub(crate) use vectorised;

/// A slice's sum, in eight lanes (so that it vectorises), the lanes added in a fixed order.
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for chunk in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l += v;
        }
    }
    let mut total = lanes.iter().sum::<f32>();
    for &v in chunks.remainder() {
        total += v;
    }
    total
}

/// `eˣ` to within a few units in the last place, branch-free so that a loop of it vectorises:
/// `2ⁿ·e^r` with `n` the nearest integer to `x/ln 2` and a degree-7 polynomial for `e^r`,
/// `|r| ≤ ln 2 / 2` (Cephes' coefficients). Arguments are clamped to where `2ⁿ` is a normal float.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two, the first part exact in few bits, so that `x − n·ln 2` loses nothing.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds to the nearest integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    let exponent = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let two_n = f32::from_bits((exponent.wrapping_add(127) << 23) as u32);
    e_r * two_n
}

/// `tanh(x) = 1 − 2/(e^{2x} + 1)`, through [`exp`]: absolute error a few units of 1's last place.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// Σ aᵢ·bᵢ in eight lanes, like [`sum`].
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for ((l, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x * y;
        }
    }
    let mut total = lanes.iter().sum::<f32>();
    for (&x, &y) in ca.remainder().iter().zip(cb.remainder()) {
        total += x * y;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    vectorised! {
        fn dispatched_dot<'a>(a: &'a [f32], b: &'a [f32]) -> f32 {
            dot(a, b)
        }
    }

    #[test]
    fn sums_and_dots_add_every_value() {
        let x: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let y: Vec<f32> = (0..37).map(|i| 2.0 - i as f32 * 0.25).collect();
        assert_eq!(sum(&x), x.iter().sum::<f32>());
        let expected: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert!(
            (dot(&x, &y) - expected).abs() < 1e-3,
            "{} vs {expected}",
            dot(&x, &y)
        );
        assert_eq!(sum(&[]), 0.0);
        assert_eq!(dispatched_dot(&x[..5], &y[..5]), dot(&x[..5], &y[..5]));
    }

    #[test]
    fn the_approximations_agree_with_the_library() {
        let mut worst_exp = 0.0f32;
        let mut worst_tanh = 0.0f32;
        for i in -100_000..=100_000 {
            let x = i as f32 / 1_000.0;
            if x > -87.0 && x < 88.0 {
                let e = x.exp();
                worst_exp = worst_exp.max(((exp(x) - e) / e).abs());
            }
            worst_tanh = worst_tanh.max((tanh(x) - x.tanh()).abs());
        }
        assert!(worst_exp < 4e-7, "exp: relative error {worst_exp}");
        assert!(worst_tanh < 4e-7, "tanh: absolute error {worst_tanh}");
        assert_eq!(exp(-1_000.0), exp(-87.0));
        assert!(exp(1_000.0).is_finite());
        assert_eq!(tanh(50.0), 1.0);
        assert_eq!(tanh(-50.0), -1.0);
    }
}
