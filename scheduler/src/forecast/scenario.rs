//! Which draw of every job's remaining work a replay runs ([`Scenario`]: the median, a band's edge,
//! or one of a Latin hypercube's strata per cohort), and the hash that shuffles the strata and
//! names cohorts.

/// One replay's draw of every job's remaining work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Every job at its median estimate.
    Median,
    /// Every job at its 10th / 90th percentile: the band's outer edges.
    Low,
    High,
    /// Draw `index` of `of`: every job at a level of its own distribution. Over the `of` draws a
    /// cohort ([`Cohorts`](super::Cohorts): a sweep's jobs) takes each `of`-th of its distribution
    /// once (a Latin hypercube), in an order of its own, so a few draws cover the tails. A sweep's
    /// jobs run about as long as each other, so they are drawn together: drawn apart, some of a
    /// sweep's hundreds of jobs always end early, and its GPUs look free long before they are.
    Sample {
        index: u32,
        of: u32,
    },
}

impl Scenario {
    /// The quantile level a job of `cohort` takes in this scenario.
    pub(crate) fn level(self, cohort: u64) -> f64 {
        match self {
            Scenario::Median => 0.5,
            Scenario::Low => 0.1,
            Scenario::High => 0.9,
            Scenario::Sample { index, of } => {
                let of = of.max(1);
                // The cohort's own shuffle of the strata (Fisher-Yates on a stream seeded by it).
                let mut strata: Vec<u32> = (0..of).collect();
                let mut state = cohort;
                for i in (1..strata.len()).rev() {
                    state = splitmix(state);
                    strata.swap(i, (state % (i as u64 + 1)) as usize);
                }
                (f64::from(strata[(index % of) as usize]) + 0.5) / f64::from(of)
            }
        }
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
