//! What each all-reduce should cost, from the latency-bandwidth (α-β) model of the links and the
//! cost γ of summing a byte, and the choice it drives: the algorithm predicted fastest for a message
//! of that size on that group.
//!
//! A message of `m` bytes takes `α + m·β(m)` on a link of its own, where `β(m)`, the seconds a byte,
//! is measured at a few sizes and interpolated between them (caches make a byte of a 64-MiB message
//! dearer than one of a 1-MiB message on the same host; with one size measured it is the plain α-β
//! model). Where transfers share what carries them — every process on one host sharing its cores over
//! loopback, or a switch's uplink — at most `c` of them run at full speed: `k` at once each take
//! `α·max(1, k/c_α) + m·β(m)·max(1, k/c(m))`, and sums alike (`c_α` for the per-message latency,
//! `c(m)` for the bytes, both measured). On a network where every pair has its path both are
//! infinite and the predictions are the textbook ones (P ranks, n bytes, ⌈·⌉ on the logarithms):
//! - ring: `2(P−1)(α + nβ/P) + (P−1)nγ/P`;
//! - binomial tree (reduce, then broadcast): `2·log₂P·(α + nβ) + log₂P·nγ`;
//! - recursive doubling: `log₂P·(α + nβ + nγ)`;
//! - Rabenseifner: `2·log₂P·α + 2nβ(P−1)/P + nγ(P−1)/P`;
//! - hierarchical: a tree reduce and broadcast inside the largest node, and the best of the above
//!   among the nodes' leaders;
//!
//! and no all-reduce beats `log₂P·α + 2nβ(P−1)/P + nγ(P−1)/P` (Chan et al., 2007). Groups whose size is
//! not a power of two pay one more step each way to fold their surplus ranks in (see
//! [`super::algorithms`]); the predictions here count it.

use super::algorithm::{Algorithm, floor_pow2};

/// Linear interpolation in `log₂ x` between `points` (ascending in `x`), flat beyond the ends.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    let i = points.iter().position(|p| p.0 >= x)?;
    let (a, b) = (points[i - 1], points[i]);
    let t = (x.log2() - a.0.log2()) / (b.0.log2() - a.0.log2());
    Some(a.1 + t * (b.1 - a.1))
}

/// One link's cost: `α` seconds a message, `β(m)` seconds a byte in a message of `m` bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Link {
    pub alpha_s: f64,
    /// `β` where `beta_by_size` says nothing (and the plain α-β model's `β`).
    pub beta_s_per_byte: f64,
    /// `(bytes, β)` measured at those message sizes, ascending; empty for a constant `β`.
    #[serde(default)]
    pub beta_by_size: Vec<(f64, f64)>,
}

impl Link {
    /// The plain α-β link.
    pub fn new(alpha_s: f64, beta_s_per_byte: f64) -> Link {
        Link {
            alpha_s,
            beta_s_per_byte,
            beta_by_size: Vec::new(),
        }
    }

    /// `β` for a message of `bytes`.
    pub fn beta(&self, bytes: f64) -> f64 {
        interpolate(&self.beta_by_size, bytes).unwrap_or(self.beta_s_per_byte)
    }

    /// The seconds a message of `bytes` takes alone.
    pub fn time(&self, bytes: f64) -> f64 {
        self.alpha_s + bytes * self.beta(bytes)
    }

    /// The least-squares line through `(bytes, seconds)` points (α kept ≥ 0, β > 0).
    pub fn fit(points: &[(f64, f64)]) -> Link {
        let n = points.len() as f64;
        if points.is_empty() {
            return Link::new(0.0, 1e-9);
        }
        let (mx, my) = (
            points.iter().map(|p| p.0).sum::<f64>() / n,
            points.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let beta = if sxx > 0.0 { sxy / sxx } else { 0.0 }.max(1e-13);
        let alpha = (my - beta * mx).max(0.0);
        Link::new(alpha, beta)
    }

    /// From one-way times of messages of several sizes (ascending, the smallest a few hundred
    /// bytes): `α` is the smallest message's time, `β` at each size of 64 KiB or more what is left
    /// a byte.
    pub fn measured(points: &[(f64, f64)]) -> Link {
        let Some(&(_, alpha)) = points.first() else {
            return Link::new(0.0, 1e-9);
        };
        let beta_by_size: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.0 >= 65536.0)
            .map(|&(bytes, t)| (bytes, ((t - alpha) / bytes).max(1e-13)))
            .collect();
        let beta = beta_by_size.last().map_or(1e-9, |p| p.1);
        Link {
            alpha_s: alpha,
            beta_s_per_byte: beta,
            beta_by_size,
        }
    }
}

/// The cost model of a job's workers, the same on every rank (rank 0 measures, all use its figures).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CostModel {
    /// Between two ranks of one node.
    pub intra: Link,
    /// Between ranks of different nodes.
    pub inter: Link,
    /// Seconds to add one byte's worth of `f32`s into another.
    pub gamma_s_per_byte: f64,
    /// How many messages' latencies overlap fully; infinite where none share.
    pub latency_concurrency: f64,
    /// How many transfers (and sums) run at full speed at once; infinite where none share.
    pub concurrency: f64,
    /// `(bytes, c)` measured at those message sizes, ascending; empty for a constant `concurrency`.
    #[serde(default)]
    pub concurrency_by_size: Vec<(f64, f64)>,
}

impl CostModel {
    /// A model with the same link everywhere and nothing shared.
    pub fn uniform(link: Link, gamma_s_per_byte: f64) -> CostModel {
        CostModel {
            intra: link.clone(),
            inter: link,
            gamma_s_per_byte,
            latency_concurrency: f64::INFINITY,
            concurrency: f64::INFINITY,
            concurrency_by_size: Vec::new(),
        }
    }

    fn concurrency_at(&self, bytes: f64) -> f64 {
        interpolate(&self.concurrency_by_size, bytes).unwrap_or(self.concurrency)
    }
}

/// Where a group's ranks are: how many on each node (nodes with at least one rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub per_node: Vec<usize>,
}

impl Shape {
    /// From each rank's node (any ids).
    pub fn of(node_of: &[usize]) -> Shape {
        let mut per_node: Vec<(usize, usize)> = Vec::new();
        for &node in node_of {
            match per_node.iter_mut().find(|(id, _)| *id == node) {
                Some((_, count)) => *count += 1,
                None => per_node.push((node, 1)),
            }
        }
        Shape {
            per_node: per_node.into_iter().map(|(_, count)| count).collect(),
        }
    }

    /// `world` ranks on one node.
    pub fn flat(world: usize) -> Shape {
        Shape {
            per_node: vec![world.max(1)],
        }
    }

    pub fn world(&self) -> usize {
        self.per_node.iter().sum()
    }

    pub fn nodes(&self) -> usize {
        self.per_node.len()
    }

    /// The hierarchical all-reduce differs from the flat ones: several nodes, one with several ranks.
    pub fn is_hierarchical(&self) -> bool {
        self.nodes() > 1 && self.per_node.iter().any(|&c| c > 1)
    }
}

/// One step of an algorithm's critical path: a message of `bytes` while `transfers` move at once
/// system-wide, then `summed` bytes added.
#[derive(Debug, Clone, Copy)]
struct Step {
    bytes: f64,
    transfers: f64,
    summed: f64,
}

fn steps_time(model: &CostModel, link: &Link, steps: impl Iterator<Item = Step>) -> f64 {
    steps
        .map(|s| {
            let waits = (s.transfers / model.latency_concurrency).max(1.0);
            let share = (s.transfers / model.concurrency_at(s.bytes)).max(1.0);
            link.alpha_s * waits
                + s.bytes * link.beta(s.bytes) * share
                + s.summed * model.gamma_s_per_byte * share
        })
        .sum()
}

fn log2_ceil(p: usize) -> u32 {
    p.next_power_of_two().trailing_zeros()
}

/// The steps of a flat algorithm on `p` ranks for `n` bytes; `copies` groups run it side by side.
fn flat_steps(algorithm: Algorithm, p: usize, n: f64, copies: f64) -> Vec<Step> {
    let pf = p as f64;
    let mut steps = Vec::new();
    if p <= 1 {
        return steps;
    }
    let step = |bytes: f64, transfers: f64, summed: f64| Step {
        bytes,
        transfers: transfers * copies,
        summed,
    };
    match algorithm {
        Algorithm::Ring => {
            for _ in 0..p - 1 {
                steps.push(step(n / pf, pf, n / pf));
            }
            for _ in 0..p - 1 {
                steps.push(step(n / pf, pf, 0.0));
            }
        }
        Algorithm::Tree => {
            let levels = log2_ceil(p);
            let senders = |j: u32| ((p - (1 << j)) as f64 / f64::from(1u32 << (j + 1))).ceil();
            for j in 0..levels {
                steps.push(step(n, senders(j), n));
            }
            for j in (0..levels).rev() {
                steps.push(step(n, senders(j), 0.0));
            }
        }
        Algorithm::RecursiveDoubling | Algorithm::Rabenseifner => {
            let p2 = floor_pow2(p);
            let rem = (p - p2) as f64;
            let p2f = p2 as f64;
            if rem > 0.0 {
                steps.push(step(n, rem, n));
            }
            let levels = p2.trailing_zeros();
            if algorithm == Algorithm::RecursiveDoubling {
                for _ in 0..levels {
                    steps.push(step(n, p2f, n));
                }
            } else {
                for j in 1..=levels {
                    let part = n / f64::from(1u32 << j);
                    steps.push(step(part, p2f, part));
                }
                for j in (1..=levels).rev() {
                    steps.push(step(n / f64::from(1u32 << j), p2f, 0.0));
                }
            }
            if rem > 0.0 {
                steps.push(step(n, rem, 0.0));
            }
        }
        Algorithm::Hierarchical => {}
    }
    steps
}

/// The algorithms that all-reduce in one level.
pub const FLAT: [Algorithm; 4] = [
    Algorithm::Ring,
    Algorithm::Tree,
    Algorithm::RecursiveDoubling,
    Algorithm::Rabenseifner,
];

/// The predicted seconds of an all-reduce of `bytes` by `algorithm` on `shape`.
pub fn predict(model: &CostModel, algorithm: Algorithm, shape: &Shape, bytes: f64) -> f64 {
    let world = shape.world();
    let flat_link = if shape.nodes() > 1 {
        &model.inter
    } else {
        &model.intra
    };
    match algorithm {
        Algorithm::Hierarchical => {
            let local = shape.per_node.iter().copied().max().unwrap_or(1);
            let nodes = shape.nodes();
            // Every node reduces (and later broadcasts) at once: their transfers add up.
            let copies = nodes as f64;
            let tree = flat_steps(Algorithm::Tree, local, bytes, copies);
            let (reduce, broadcast) = tree.split_at(tree.len() / 2);
            let inner = inner_algorithm(model, nodes, bytes);
            steps_time(model, &model.intra, reduce.iter().copied())
                + steps_time(
                    model,
                    &model.inter,
                    flat_steps(inner, nodes, bytes, 1.0).into_iter(),
                )
                + steps_time(model, &model.intra, broadcast.iter().copied())
        }
        flat => steps_time(
            model,
            flat_link,
            flat_steps(flat, world, bytes, 1.0).into_iter(),
        ),
    }
}

/// The algorithm the nodes' leaders use inside a hierarchical all-reduce.
pub fn inner_algorithm(model: &CostModel, leaders: usize, bytes: f64) -> Algorithm {
    let shape = Shape::flat(leaders);
    let mut link_model = model.clone();
    link_model.intra = model.inter.clone();
    best_of(&FLAT, |a| predict(&link_model, a, &shape, bytes))
}

fn best_of(candidates: &[Algorithm], time: impl Fn(Algorithm) -> f64) -> Algorithm {
    let mut best = candidates[0];
    let mut best_time = f64::INFINITY;
    for &a in candidates {
        let t = time(a);
        if t < best_time {
            (best, best_time) = (a, t);
        }
    }
    best
}

/// The all-reduce predicted fastest for `bytes` on `shape` (hierarchical only where it differs).
pub fn choose(model: &CostModel, shape: &Shape, bytes: f64) -> Algorithm {
    if shape.is_hierarchical() {
        best_of(
            &[
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::RecursiveDoubling,
                Algorithm::Rabenseifner,
                Algorithm::Hierarchical,
            ],
            |a| predict(model, a, shape, bytes),
        )
    } else {
        best_of(&FLAT, |a| predict(model, a, shape, bytes))
    }
}

/// The lower bound on any all-reduce of `bytes` among `shape`'s ranks (on the flat algorithms' link,
/// every rank moving data at once, each message at least `bytes / P`).
pub fn lower_bound(model: &CostModel, shape: &Shape, bytes: f64) -> f64 {
    let p = shape.world();
    if p <= 1 {
        return 0.0;
    }
    let link = if shape.nodes() > 1 {
        &model.inter
    } else {
        &model.intra
    };
    let pf = p as f64;
    let chunk = bytes / pf;
    let share = (pf / model.concurrency_at(chunk)).max(1.0);
    f64::from(log2_ceil(p)) * link.alpha_s
        + 2.0 * bytes * link.beta(chunk) * (pf - 1.0) / pf * share
        + bytes * model.gamma_s_per_byte * (pf - 1.0) / pf * share
}

/// The bytes each worker sends, on average over the group, in an all-reduce of `bytes` by
/// `algorithm` on `shape` (`inner`: the leaders' algorithm of a hierarchical one).
pub fn bytes_per_worker(algorithm: Algorithm, inner: Algorithm, shape: &Shape, bytes: f64) -> f64 {
    let world = shape.world();
    if world <= 1 {
        return 0.0;
    }
    let total = match algorithm {
        Algorithm::Hierarchical => {
            let within: f64 = shape
                .per_node
                .iter()
                .map(|&l| 2.0 * (l as f64 - 1.0) * bytes)
                .sum();
            within + flat_total_bytes(inner, shape.nodes(), bytes)
        }
        flat => flat_total_bytes(flat, world, bytes),
    };
    total / world as f64
}

/// The bytes all `p` ranks send together in a flat all-reduce of `n` bytes.
fn flat_total_bytes(algorithm: Algorithm, p: usize, n: f64) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    let pf = p as f64;
    let p2 = floor_pow2(p);
    let folds = 2.0 * (p - p2) as f64 * n;
    match algorithm {
        Algorithm::Ring => 2.0 * (pf - 1.0) * n,
        Algorithm::Tree => 2.0 * (pf - 1.0) * n,
        Algorithm::RecursiveDoubling => p2 as f64 * f64::from(p2.trailing_zeros()) * n + folds,
        Algorithm::Rabenseifner => 2.0 * (p2 as f64 - 1.0) * n + folds,
        Algorithm::Hierarchical => 2.0 * (pf - 1.0) * n,
    }
}
