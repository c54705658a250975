//! The normal distribution's functions the Parzen estimators need.

use std::f64::consts::{PI, SQRT_2};

/// The error function (Abramowitz and Stegun 7.1.26 refined by a Chebyshev fit of erfc; |error| < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The standard normal's cumulative distribution.
pub fn norm_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / SQRT_2)
}

/// The standard normal's quantile function (Acklam's rational approximation, relative error < 1.2e-9
/// before the clamp to the open unit interval).
pub fn norm_ppf(p: f64) -> f64 {
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let low = 0.024_25;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

/// Log density at `x` of a normal(`mu`, `sigma`) truncated to `[0, 1]`.
pub fn truncnorm_log_pdf(x: f64, mu: f64, sigma: f64) -> f64 {
    let z = (x - mu) / sigma;
    let mass = (norm_cdf((1.0 - mu) / sigma) - norm_cdf(-mu / sigma)).max(1e-300);
    -0.5 * z * z - (sigma * (2.0 * PI).sqrt()).ln() - mass.ln()
}

/// A draw from a normal(`mu`, `sigma`) truncated to `[0, 1]`, by inverting its distribution at `u`.
pub fn truncnorm_sample(u: f64, mu: f64, sigma: f64) -> f64 {
    let (lo, hi) = (norm_cdf(-mu / sigma), norm_cdf((1.0 - mu) / sigma));
    (mu + sigma * norm_ppf(lo + u * (hi - lo))).clamp(0.0, 1.0)
}

/// log(Σ exp(xᵢ)), stable.
pub fn log_sum_exp(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + values.map(|v| (v - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_functions_agree_with_tables() {
        assert!((norm_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((norm_cdf(1.959_963_985) - 0.975).abs() < 1e-6);
        assert!((norm_ppf(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((norm_ppf(0.001) + 3.090_232_306).abs() < 1e-6);
        for p in [0.01, 0.2, 0.5, 0.8, 0.99] {
            assert!((norm_cdf(norm_ppf(p)) - p).abs() < 1e-6, "{p}");
        }
        // A truncated density integrates to one.
        let n = 10_000;
        let total: f64 = (0..n)
            .map(|i| truncnorm_log_pdf((i as f64 + 0.5) / n as f64, 0.2, 0.3).exp() / n as f64)
            .sum();
        assert!((total - 1.0).abs() < 1e-4, "{total}");
    }
}
