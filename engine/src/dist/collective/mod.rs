//! Collective operations among a job's workers: all-reduce by ring, binomial tree, recursive doubling,
//! Rabenseifner or the hierarchical (per-node, then among nodes) algorithm, chosen for each message
//! size from a latency-bandwidth model the workers measure when they join ([`Communicator::calibrate`])
//! or fixed by the job; and reduce-scatter, all-gather and broadcast. It owns the workers' mesh of
//! connections ([`mesh`]), the algorithms ([`algorithms`]) and their cost model ([`cost`]).

mod algorithm;
pub mod algorithms;
pub mod cost;
pub mod mesh;

pub use algorithm::Algorithm;
use algorithms::{
    flat_allreduce, ring_all_gather, ring_reduce_scatter, tree_broadcast, tree_reduce,
};
use cost::{CostModel, Link, Shape};
pub use mesh::Mesh;
use std::ops::Range;
use std::time::Instant;

/// Message sizes rank 0 and a peer time each other with to measure a link (bytes): those up to the
/// largest message the job will sum, and the next one above it.
const PING_SIZES: [usize; 5] = [256, 64 << 10, 1 << 20, 4 << 20, 16 << 20];
/// From this size on, every pair also exchanges at once to measure how transfers slow each other.
const BUSY_FROM: usize = 1 << 20;
/// How many message sizes a communicator remembers its plan for.
const PLANS: usize = 4;
/// Bytes summed to time γ.
const SUM_BYTES: usize = 1 << 20;
/// "Nothing shared", inside a measured curve (finite, so interpolation stays finite).
const UNSHARED: f64 = 1e30;

/// The sizes [`PING_SIZES`] measures for messages of up to `largest` bytes.
fn ping_sizes(largest: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    for size in PING_SIZES {
        sizes.push(size);
        if size >= largest.max(64 << 10) {
            break;
        }
    }
    sizes
}

/// A worker's handle on the job's collectives.
#[derive(Debug)]
pub struct Communicator {
    mesh: Mesh,
    /// Each rank's node (any ids; equal ids share a node).
    node_of: Vec<usize>,
    shape: Shape,
    all: Vec<usize>,
    /// The ranks on this worker's node, and this worker's place among them.
    locals: Vec<usize>,
    local_me: usize,
    /// The first rank of each node, and this worker's place among them if it is one.
    leaders: Vec<usize>,
    leader_me: Option<usize>,
    model: Option<CostModel>,
    /// The last few sizes planned for, newest last: each one's automatic choice and the leaders'
    /// algorithm (a job sums messages of one or two sizes every step — under local SGD its
    /// wishes and its parameters — and predicting costs allocations).
    planned: Vec<(usize, Algorithm, Algorithm)>,
    scratch: Vec<f32>,
}

impl Communicator {
    /// The collectives over `mesh`, whose ranks are on the nodes `node_of` names.
    pub fn new(mesh: Mesh, node_of: Vec<usize>) -> anyhow::Result<Communicator> {
        let (world, rank) = (mesh.world(), mesh.rank());
        if node_of.len() != world {
            anyhow::bail!("{} nodes named for {world} workers", node_of.len());
        }
        let locals: Vec<usize> = (0..world)
            .filter(|&r| node_of[r] == node_of[rank])
            .collect();
        let local_me = locals.iter().position(|&r| r == rank).unwrap_or(0);
        let leaders: Vec<usize> = (0..world)
            .filter(|&r| (0..r).all(|q| node_of[q] != node_of[r]))
            .collect();
        let leader_me = leaders.iter().position(|&r| r == rank);
        Ok(Communicator {
            shape: Shape::of(&node_of),
            node_of,
            all: (0..world).collect(),
            locals,
            local_me,
            leaders,
            leader_me,
            mesh,
            model: None,
            planned: Vec::with_capacity(PLANS),
            scratch: Vec::new(),
        })
    }

    /// Nodes from the workers' addresses (`host:port`): workers with the same host share a node.
    pub fn nodes_of_addresses(addresses: &[String]) -> Vec<usize> {
        let hosts: Vec<&str> = addresses
            .iter()
            .map(|a| a.rsplit_once(':').map_or(a.as_str(), |(host, _)| host))
            .collect();
        hosts
            .iter()
            .map(|h| hosts.iter().position(|x| x == h).unwrap_or(0))
            .collect()
    }

    pub fn rank(&self) -> usize {
        self.mesh.rank()
    }

    pub fn world(&self) -> usize {
        self.mesh.world()
    }

    /// Each rank's node (equal ids share a node).
    pub fn node_of(&self) -> &[usize] {
        &self.node_of
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn model(&self) -> Option<&CostModel> {
        self.model.as_ref()
    }

    /// Uses `model` for the automatic choice (it must be the same on every rank).
    pub fn set_model(&mut self, model: CostModel) {
        self.model = Some(model);
        self.planned.clear();
    }

    /// The algorithm the automatic choice takes for `bytes` (the ring before any model).
    pub fn choose(&self, bytes: usize) -> Algorithm {
        match &self.model {
            Some(model) => cost::choose(model, &self.shape, bytes as f64),
            None => Algorithm::Ring,
        }
    }

    /// The automatic choice for `bytes` and the leaders' algorithm inside a hierarchical
    /// all-reduce, remembered for the last [`PLANS`] sizes asked.
    fn plan(&mut self, bytes: usize) -> (Algorithm, Algorithm) {
        if let Some(&(_, choice, inner)) = self.planned.iter().find(|p| p.0 == bytes) {
            return (choice, inner);
        }
        let inner = match &self.model {
            Some(model) => cost::inner_algorithm(model, self.leaders.len(), bytes as f64),
            None => Algorithm::Ring,
        };
        let choice = self.choose(bytes);
        if self.planned.len() == PLANS {
            self.planned.remove(0);
        }
        self.planned.push((bytes, choice, inner));
        (choice, inner)
    }

    /// Replaces `data` on every worker by the element-wise sum of everyone's, by `algorithm` or
    /// the automatic choice; returns the algorithm used. Every worker must call it alike.
    pub fn allreduce(
        &mut self,
        algorithm: Option<Algorithm>,
        data: &mut [f32],
    ) -> anyhow::Result<Algorithm> {
        let (choice, inner) = self.plan(data.len() * 4);
        let algorithm = algorithm.unwrap_or(choice);
        if self.world() == 1 {
            return Ok(algorithm);
        }
        let me = self.rank();
        match algorithm {
            Algorithm::Hierarchical => {
                tree_reduce(
                    &mut self.mesh,
                    &self.locals,
                    self.local_me,
                    data,
                    &mut self.scratch,
                )?;
                if let Some(leader_me) = self.leader_me {
                    flat_allreduce(
                        inner,
                        &mut self.mesh,
                        &self.leaders,
                        leader_me,
                        data,
                        &mut self.scratch,
                    )?;
                }
                tree_broadcast(&mut self.mesh, &self.locals, self.local_me, 0, data)?;
            }
            flat => flat_allreduce(flat, &mut self.mesh, &self.all, me, data, &mut self.scratch)?,
        }
        Ok(algorithm)
    }

    /// Replaces `data` on each of `members` (ranks, this worker among them, in the same order on
    /// each) by their element-wise sum, by `algorithm` when it is a flat one, else by the flat
    /// algorithm the model predicts fastest for a group shaped `shape` (the ring before any
    /// model); returns the algorithm used. A pipeline's replicas of one stage sum their gradients
    /// with it.
    pub fn allreduce_among(
        &mut self,
        members: &[usize],
        shape: &Shape,
        algorithm: Option<Algorithm>,
        data: &mut [f32],
    ) -> anyhow::Result<Algorithm> {
        let me = members
            .iter()
            .position(|&r| r == self.rank())
            .ok_or_else(|| anyhow::anyhow!("worker {} is not in {members:?}", self.rank()))?;
        let algorithm = match algorithm {
            Some(Algorithm::Hierarchical) | None => self.choose_flat(shape, data.len() * 4),
            Some(flat) => flat,
        };
        if members.len() > 1 {
            flat_allreduce(
                algorithm,
                &mut self.mesh,
                members,
                me,
                data,
                &mut self.scratch,
            )?;
        }
        Ok(algorithm)
    }

    /// The flat all-reduce predicted fastest for `bytes` among a group shaped `shape` (the ring
    /// before any model). Predicting allocates: callers summing the same sizes again and again
    /// remember the answer.
    pub fn choose_flat(&self, shape: &Shape, bytes: usize) -> Algorithm {
        match &self.model {
            Some(model) => match cost::choose(model, shape, bytes as f64) {
                Algorithm::Hierarchical => Algorithm::Ring,
                flat => flat,
            },
            None => Algorithm::Ring,
        }
    }

    /// The point-to-point connections to the other workers.
    pub fn mesh(&mut self) -> &mut Mesh {
        &mut self.mesh
    }

    /// The bytes a worker sends on average in an all-reduce of `bytes` by `algorithm`.
    pub fn bytes_sent(&mut self, algorithm: Algorithm, bytes: usize) -> u64 {
        let (_, inner) = self.plan(bytes);
        cost::bytes_per_worker(algorithm, inner, &self.shape, bytes as f64) as u64
    }

    /// The elements of `data` this worker holds summed after [`Communicator::reduce_scatter`].
    pub fn my_block(&self, n: usize) -> Range<usize> {
        algorithms::block(n, self.world(), self.rank())
    }

    /// Ring reduce-scatter: afterwards `data[self.my_block(data.len())]` holds that part's sum over
    /// every worker (the rest of `data` is left with partial sums).
    pub fn reduce_scatter(&mut self, data: &mut [f32]) -> anyhow::Result<Range<usize>> {
        let me = self.rank();
        ring_reduce_scatter(&mut self.mesh, &self.all, me, data, &mut self.scratch)?;
        Ok(self.my_block(data.len()))
    }

    /// Ring all-gather: each worker brings `data[self.my_block(data.len())]` and ends with all.
    pub fn all_gather(&mut self, data: &mut [f32]) -> anyhow::Result<()> {
        let me = self.rank();
        ring_all_gather(&mut self.mesh, &self.all, me, data)
    }

    /// Binomial-tree broadcast of `root`'s `data`.
    pub fn broadcast(&mut self, root: usize, data: &mut [f32]) -> anyhow::Result<()> {
        let me = self.rank();
        tree_broadcast(&mut self.mesh, &self.all, me, root, data)
    }

    /// Returns once every worker has called it.
    pub fn barrier(&mut self) -> anyhow::Result<()> {
        let mut token = [0.0f32];
        let me = self.rank();
        tree_reduce(&mut self.mesh, &self.all, me, &mut token, &mut self.scratch)?;
        tree_broadcast(&mut self.mesh, &self.all, me, 0, &mut token)
    }

    /// Half the fastest round trip of `bytes` between rank 0 and `peer` (the others return `None`).
    fn ping(&mut self, peer: usize, bytes: usize, rounds: usize) -> anyhow::Result<Option<f64>> {
        let mut buffer = vec![0.0f32; bytes / 4];
        let me = self.rank();
        if me == 0 {
            let mut best = f64::INFINITY;
            for _ in 0..rounds {
                let t = Instant::now();
                self.mesh.send(peer, &buffer)?;
                self.mesh.recv(peer, &mut buffer)?;
                best = best.min(t.elapsed().as_secs_f64() / 2.0);
            }
            Ok(Some(best))
        } else {
            if me == peer {
                for _ in 0..rounds {
                    self.mesh.recv(0, &mut buffer)?;
                    self.mesh.send(0, &buffer)?;
                }
            }
            Ok(None)
        }
    }

    /// Rank 0's measure of the link to `peer` (the others' `None`).
    fn measure_link(&mut self, peer: usize, sizes: &[usize]) -> anyhow::Result<Option<Link>> {
        let mut points = Vec::new();
        for &bytes in sizes {
            let rounds = if bytes >= BUSY_FROM { 3 } else { 10 };
            if let Some(t) = self.ping(peer, bytes, rounds)? {
                points.push((bytes as f64, t));
            }
        }
        self.barrier()?;
        Ok((!points.is_empty()).then(|| Link::measured(&points)))
    }

    /// The fastest of `rounds` exchanges of `bytes` by every pair `(2i, 2i + 1)` at once, as rank
    /// 0 sees it.
    fn busy(&mut self, bytes: usize, rounds: usize) -> anyhow::Result<f64> {
        let pairs = self.world() / 2;
        let me = self.rank();
        let mut out = vec![0.0f32; bytes / 4];
        let mut into = vec![0.0f32; bytes / 4];
        let mut best = f64::INFINITY;
        for _ in 0..rounds {
            self.barrier()?;
            let t = Instant::now();
            if me < 2 * pairs {
                let partner = me ^ 1;
                self.mesh.exchange(partner, &out, partner, &mut into)?;
            }
            best = best.min(t.elapsed().as_secs_f64());
            std::mem::swap(&mut out, &mut into);
        }
        self.barrier()?;
        Ok(best)
    }

    /// Measures the links, how transfers at once slow each other and the cost of summing, for
    /// messages of up to `largest` bytes: rank 0 times messages with a peer on its node and one on
    /// another node, then every pair exchanges at once. Every worker calls it and ends with rank
    /// 0's figures (so every worker chooses alike). Takes some tens of milliseconds (a few hundred
    /// for messages of many megabytes).
    pub fn calibrate(&mut self, largest: usize) -> anyhow::Result<CostModel> {
        let world = self.world();
        let gamma = sum_cost();
        if world == 1 {
            let model = CostModel::uniform(Link::new(0.0, 1e-9), gamma);
            self.set_model(model.clone());
            return Ok(model);
        }
        let sizes = ping_sizes(largest);
        self.barrier()?;
        let node0 = self.node_of[0];
        let intra_peer = (1..world).find(|&r| self.node_of[r] == node0);
        let inter_peer = (1..world).find(|&r| self.node_of[r] != node0);
        let intra = match intra_peer {
            Some(peer) => self.measure_link(peer, &sizes)?,
            None => None,
        };
        let inter = match inter_peer {
            Some(peer) => self.measure_link(peer, &sizes)?,
            None => None,
        };
        let busy_latency = self.busy(PING_SIZES[0], 10)?;
        let mut busy_bytes = Vec::new();
        for &bytes in sizes.iter().filter(|&&b| b >= BUSY_FROM) {
            busy_bytes.push((bytes, self.busy(bytes, 3)?));
        }
        // Rank 0's figures, as f32s every rank reads alike: α of each link, γ, the latencies'
        // concurrency, then per size of 64 KiB or more each link's β and the transfers'
        // concurrency (NaN where not measured).
        let measured: Vec<usize> = PING_SIZES.iter().copied().filter(|&b| b >= 65536).collect();
        let mut figures = vec![f32::NAN; 4 + 3 * measured.len()];
        if self.rank() == 0 {
            let first = intra
                .clone()
                .or(inter.clone())
                .unwrap_or(Link::new(0.0, 1e-9));
            let intra = intra.unwrap_or(first.clone());
            let inter = inter.unwrap_or(first);
            let pair = if self.node_of[1] == node0 {
                &intra
            } else {
                &inter
            };
            let transfers = (2 * (world / 2)) as f64;
            // k transfers at once each slowed by `slowdown`: k / slowdown run at full speed.
            let concurrency = |slowdown: f64| {
                if slowdown > 1.1 {
                    (transfers / slowdown).max(1.0)
                } else {
                    UNSHARED
                }
            };
            figures[0] = intra.alpha_s as f32;
            figures[1] = inter.alpha_s as f32;
            figures[2] = gamma as f32;
            figures[3] = concurrency(busy_latency / pair.alpha_s.max(1e-9)) as f32;
            for (i, &bytes) in measured.iter().enumerate() {
                let at = |link: &Link| {
                    link.beta_by_size
                        .iter()
                        .find(|p| p.0 == bytes as f64)
                        .map_or(f32::NAN, |p| p.1 as f32)
                };
                figures[4 + 3 * i] = at(&intra);
                figures[5 + 3 * i] = at(&inter);
                if let Some(&(_, t)) = busy_bytes.iter().find(|b| b.0 == bytes) {
                    let alone = bytes as f64 * pair.beta(bytes as f64);
                    figures[6 + 3 * i] = concurrency((t - busy_latency).max(0.0) / alone) as f32;
                }
            }
        }
        self.broadcast(0, &mut figures)?;
        let f: Vec<f64> = figures.iter().map(|&x| f64::from(x)).collect();
        let curve = |offset: usize| -> Vec<(f64, f64)> {
            measured
                .iter()
                .enumerate()
                .filter(|(i, _)| !f[offset + 3 * i].is_nan())
                .map(|(i, &bytes)| (bytes as f64, f[offset + 3 * i]))
                .collect()
        };
        let link = |alpha: f64, beta_by_size: Vec<(f64, f64)>| Link {
            alpha_s: alpha,
            beta_s_per_byte: beta_by_size.last().map_or(1e-9, |p| p.1),
            beta_by_size,
        };
        let concurrency_by_size = curve(6);
        let model = CostModel {
            intra: link(f[0], curve(4)),
            inter: link(f[1], curve(5)),
            gamma_s_per_byte: f[2],
            latency_concurrency: f[3],
            concurrency: concurrency_by_size.last().map_or(UNSHARED, |p| p.1),
            concurrency_by_size,
        };
        self.set_model(model.clone());
        Ok(model)
    }
}

/// Seconds per byte to add one vector of `f32`s into another (the fastest of three).
fn sum_cost() -> f64 {
    let n = SUM_BYTES / 4;
    let mut target = vec![1.0f32; n];
    let incoming = vec![0.5f32; n];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        for (x, &y) in target.iter_mut().zip(&incoming) {
            *x += y;
        }
        std::hint::black_box(&mut target);
        best = best.min(t.elapsed().as_secs_f64());
    }
    best / SUM_BYTES as f64
}

#[cfg(test)]
mod tests;
