//! Tree-structured Parzen estimators (Bergstra et al. 2011), multivariate (Falkner et al. 2018).
//!
//! Finished trials are split by their loss into the good ones (the best 15%, at most 25) and the rest,
//! and each group's points are smoothed into a density: a mixture with one kernel per point plus a
//! broad prior. Real and integer parameters live on the unit interval (log space where asked) with
//! truncated Gaussian kernels as wide as the larger gap to their neighbours (Hyperopt's rule, with
//! Optuna's floor); a category keeps most of its kernel's mass on the observed category. Good points
//! weigh by rank (1/(1 + rank/n)), so the search leans towards the very best; the rest weigh alike,
//! older ones less once there are many. The proposal is the best of `candidates` draws from the good density by the
//! ratio good/rest. The parameters every trial has are modelled jointly, so the correlations between
//! them count (the univariate TPE of Hyperopt and Optuna's default ignores them); a conditional
//! parameter is modelled on its own over the trials where it exists. Trials stopped early join the rest.

use crate::math::{log_sum_exp, truncnorm_log_pdf, truncnorm_sample};
use crate::random::{random_point, trial_rng};
use crate::space::{self, Dim};
use crate::trials::TrialRecord;
use drover_core::experiment::{Assignment, ExperimentSpec, Param};
use rand::Rng;
use serde_json::Value;

/// Tunables.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Random trials before the model takes over.
    pub startup_trials: u32,
    /// Draws from the good density per proposal.
    pub candidates: u32,
    /// Weight of the broad prior among the kernels (each kernel weighs 1).
    pub prior_weight: f64,
    /// Model the parameters jointly (one kernel per observed point over all of them) rather than each
    /// on its own.
    pub multivariate: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            startup_trials: 10,
            candidates: 64,
            prior_weight: 1.0,
            multivariate: true,
        }
    }
}

/// How many of `n` finished trials count as good.
///
/// 15% (at most 25): on Branin and Hartmann-6 (seeds 1000-1099, not the benchmark's) it beat Optuna's
/// 10% at 50 and 100 trials with 64 candidates; see the README's search section.
pub fn num_good(n: usize) -> usize {
    (n as f64 * 0.15).ceil().clamp(1.0, 25.0) as usize
}

/// The point to try as trial `index`.
pub fn propose(
    spec: &ExperimentSpec,
    trials: &[TrialRecord],
    settings: &Settings,
    index: u32,
) -> Assignment {
    let goal = spec.metric.goal;
    let mut finished: Vec<(&TrialRecord, f64)> = trials
        .iter()
        .filter_map(|trial| {
            let loss = goal.loss(trial.final_value()?);
            loss.is_finite().then_some((trial, loss))
        })
        .collect();
    if finished.len() < settings.startup_trials.max(1) as usize {
        return random_point(spec, index);
    }
    finished.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.index.cmp(&b.0.index)));
    let split = num_good(finished.len());
    let good: Vec<&TrialRecord> = finished[..split].iter().map(|(t, _)| *t).collect();
    let mut rest: Vec<&TrialRecord> = finished[split..].iter().map(|(t, _)| *t).collect();
    // Trials stopped early are worse than any that finished.
    rest.extend(
        trials
            .iter()
            .filter(|trial| !trial.is_active() && trial.final_value().is_none())
            .filter(|trial| trial.best_loss(goal).is_some()),
    );
    // The good ones stay ranked best first (their kernels weigh by rank); the rest in the order they
    // ran (older ones weigh less once there are many).
    rest.sort_by_key(|t| t.index);
    let good: Vec<&Assignment> = good.into_iter().map(|t| &t.params).collect();
    let rest: Vec<&Assignment> = rest.into_iter().map(|t| &t.params).collect();

    let dims = space::dims(&spec.parameters);
    let mut rng = trial_rng(spec.seed, index, 1);
    let mut point = Assignment::new();
    // The parameters every trial has, jointly.
    let joint: Vec<&Dim<'_>> = dims
        .iter()
        .filter(|dim| !dim.is_conditional() && !matches!(dim.param, Param::Const { .. }))
        .collect();
    choose(&joint, &good, &rest, settings, &mut rng, &mut point);
    // The rest in order: constants, and each conditional parameter where its condition holds.
    for dim in &dims {
        if point.contains_key(dim.name) || !dim.is_active(&point) {
            continue;
        }
        if let Param::Const { value, .. } = dim.param {
            point.insert(dim.name.to_owned(), value.clone());
            continue;
        }
        let has = |p: &&Assignment| p.contains_key(dim.name);
        let good_here: Vec<&Assignment> = good.iter().copied().filter(has).collect();
        let rest_here: Vec<&Assignment> = rest.iter().copied().filter(has).collect();
        if good_here.is_empty() {
            point.insert(dim.name.to_owned(), dim.sample(&mut rng));
            continue;
        }
        choose(
            &[dim],
            &good_here,
            &rest_here,
            settings,
            &mut rng,
            &mut point,
        );
    }
    point
}

/// Draws `candidates` points of `dims` from the good density and writes the best by good/rest into
/// `point`.
fn choose(
    dims: &[&Dim<'_>],
    good: &[&Assignment],
    rest: &[&Assignment],
    settings: &Settings,
    rng: &mut impl Rng,
    point: &mut Assignment,
) {
    if dims.is_empty() {
        return;
    }
    if !settings.multivariate && dims.len() > 1 {
        for dim in dims {
            choose(&[*dim], good, rest, settings, rng, point);
        }
        return;
    }
    let l = Parzen::fit(dims, good, settings.prior_weight, true);
    let g = Parzen::fit(dims, rest, settings.prior_weight, false);
    let mut best: Option<(f64, Vec<Coord>)> = None;
    for _ in 0..settings.candidates.max(1) {
        let x = l.sample(rng);
        let score = l.log_pdf(&x) - g.log_pdf(&x);
        if best.as_ref().is_none_or(|(top, _)| score > *top) {
            best = Some((score, x));
        }
    }
    if let Some((_, x)) = best {
        for (dim, coord) in dims.iter().zip(x) {
            let value = match coord {
                Coord::Unit(u) => dim.from_unit(u),
                Coord::Category(c) => dim.category(c),
            };
            point.insert(dim.name.to_owned(), value);
        }
    }
}

/// One coordinate of a point in the model's space.
#[derive(Debug, Clone, Copy)]
enum Coord {
    Unit(f64),
    Category(usize),
}

/// A mixture of product kernels, one per observed point, plus the prior (the last component).
#[derive(Debug)]
struct Parzen {
    /// Per dimension: the number of categories, or `None` for a number.
    kinds: Vec<Option<usize>>,
    /// Component centres; the prior's is the middle of every range (categories: unused).
    centres: Vec<Vec<Coord>>,
    /// Kernel width per component and numeric dimension; the prior's is 1.
    sigma: Vec<Vec<f64>>,
    /// The prior's share of a category kernel's mass, spread over all categories.
    spread: f64,
    log_weights: Vec<f64>,
}

impl Parzen {
    /// `ranked`: the points come best first and weigh 1/(1 + rank/n); otherwise they come in the order
    /// they ran and all weigh 1, but for older ones past the newest 25, which weigh less (Optuna's ramp).
    fn fit(dims: &[&Dim<'_>], points: &[&Assignment], prior_weight: f64, ranked: bool) -> Parzen {
        let kinds: Vec<Option<usize>> = dims.iter().map(|dim| dim.categories()).collect();
        let centres: Vec<Vec<Coord>> = points
            .iter()
            .map(|point| {
                dims.iter()
                    .map(|dim| coord(dim, point.get(dim.name)))
                    .collect()
            })
            .collect();
        let n = centres.len().max(1) as f64;
        let sigma = adaptive_widths(&kinds, &centres);
        let spread = prior_weight / (n + 1.0);
        // Older observations weigh less once there are more than 25 (Optuna's ramp).
        let count = centres.len();
        let mut weights: Vec<f64> = (0..count)
            .map(|i| {
                if ranked {
                    return 1.0 / (1.0 + i as f64 / count as f64);
                }
                let old = count.saturating_sub(25);
                if i >= old || old < 2 {
                    1.0
                } else {
                    1.0 / count as f64 + (1.0 - 1.0 / count as f64) * i as f64 / (old - 1) as f64
                }
            })
            .collect();
        weights.push(prior_weight);
        let total: f64 = weights.iter().sum();
        let log_weights = weights.iter().map(|w| (w / total).ln()).collect();
        Parzen {
            kinds,
            centres,
            sigma,
            spread,
            log_weights,
        }
    }

    /// A category kernel's probability of its own category (`own`) or of another one.
    fn category_probability(&self, categories: usize, own: bool) -> f64 {
        let mass = 1.0 + self.spread * categories as f64;
        if own {
            (1.0 + self.spread) / mass
        } else {
            self.spread / mass
        }
    }

    fn num_components(&self) -> usize {
        self.centres.len() + 1
    }

    fn is_prior(&self, component: usize) -> bool {
        component == self.centres.len()
    }

    fn kernel_log_pdf(&self, component: usize, dim: usize, x: Coord) -> f64 {
        match (self.kinds[dim], x) {
            (Some(k), Coord::Category(c)) => {
                if self.is_prior(component) {
                    return -(k as f64).ln();
                }
                let centre = match self.centres[component][dim] {
                    Coord::Category(centre) => centre,
                    Coord::Unit(_) => 0,
                };
                self.category_probability(k, c == centre).ln()
            }
            (_, Coord::Unit(u)) => {
                if self.is_prior(component) {
                    return truncnorm_log_pdf(u, 0.5, 1.0);
                }
                let mu = match self.centres[component][dim] {
                    Coord::Unit(mu) => mu,
                    Coord::Category(_) => 0.5,
                };
                truncnorm_log_pdf(u, mu, self.sigma[component][dim])
            }
            (None, Coord::Category(_)) => 0.0,
        }
    }

    fn log_pdf(&self, x: &[Coord]) -> f64 {
        log_sum_exp((0..self.num_components()).map(|component| {
            self.log_weights[component]
                + x.iter()
                    .enumerate()
                    .map(|(dim, &coord)| self.kernel_log_pdf(component, dim, coord))
                    .sum::<f64>()
        }))
    }

    fn pick_component(&self, rng: &mut impl Rng) -> usize {
        let mut u = rng.random::<f64>();
        for (i, log_weight) in self.log_weights.iter().enumerate() {
            let weight = log_weight.exp();
            if u < weight {
                return i;
            }
            u -= weight;
        }
        self.num_components() - 1
    }

    fn sample(&self, rng: &mut impl Rng) -> Vec<Coord> {
        // Pick a component by weight, then each coordinate from its kernel.
        let component = self.pick_component(rng);
        (0..self.kinds.len())
            .map(|dim| self.sample_coord(component, dim, rng))
            .collect()
    }

    fn sample_coord(&self, component: usize, dim: usize, rng: &mut impl Rng) -> Coord {
        {
            match self.kinds[dim] {
                Some(k) => {
                    let centre = match self.centres.get(component).map(|c| c[dim]) {
                        Some(Coord::Category(centre)) => Some(centre),
                        _ => None,
                    };
                    let draw = rng.random::<f64>();
                    match centre {
                        Some(centre) if draw < self.category_probability(k, true) || k <= 1 => {
                            Coord::Category(centre)
                        }
                        Some(centre) => {
                            // Uniform among the other categories.
                            let other = rng.random_range(0..k - 1);
                            Coord::Category(if other >= centre { other + 1 } else { other })
                        }
                        None => Coord::Category(rng.random_range(0..k)),
                    }
                }
                None => {
                    let (mu, sigma) = match self.centres.get(component).map(|c| c[dim]) {
                        Some(Coord::Unit(mu)) => (mu, self.sigma[component][dim]),
                        _ => (0.5, 1.0),
                    };
                    Coord::Unit(truncnorm_sample(rng.random::<f64>(), mu, sigma))
                }
            }
        }
    }
}

/// Each kernel's width on each numeric dimension: the larger gap to its neighbours among the observed
/// values, the ends of the range counting as neighbours except for the outermost points, which take
/// their inner gap (Hyperopt's rule); clipped to `[1/min(100, n+2), 1]` so a tight cluster narrows
/// the search without collapsing it.
fn adaptive_widths(kinds: &[Option<usize>], centres: &[Vec<Coord>]) -> Vec<Vec<f64>> {
    let n = centres.len();
    let floor = 1.0 / ((n + 2) as f64).min(100.0);
    let mut sigma = vec![vec![1.0; kinds.len()]; n];
    for (dim, kind) in kinds.iter().enumerate() {
        if kind.is_some() {
            continue;
        }
        let mut order: Vec<(f64, usize)> = centres
            .iter()
            .enumerate()
            .map(|(i, c)| match c[dim] {
                Coord::Unit(u) => (u, i),
                Coord::Category(_) => (0.5, i),
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let at = |i: isize| -> f64 {
            if i < 0 {
                0.0
            } else {
                order.get(i as usize).map_or(1.0, |p| p.0)
            }
        };
        for (position, &(value, owner)) in order.iter().enumerate() {
            let p = position as isize;
            let mut width = (value - at(p - 1)).max(at(p + 1) - value);
            if n >= 2 && position == 0 {
                width = at(1) - value;
            } else if n >= 2 && position == n - 1 {
                width = value - at(p - 1);
            }
            sigma[owner][dim] = width.clamp(floor, 1.0);
        }
    }
    sigma
}

fn coord(dim: &Dim<'_>, value: Option<&Value>) -> Coord {
    match dim.categories() {
        Some(_) => Coord::Category(value.and_then(|v| dim.category_of(v)).unwrap_or(0)),
        None => Coord::Unit(value.and_then(|v| dim.to_unit(v)).unwrap_or(0.5)),
    }
}
