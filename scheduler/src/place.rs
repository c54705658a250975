//! Free resources and gang placement, shared by every policy.
//!
//! Nodes are kept in buckets by free GPU count, so placing a job costs O(GPUs per node + nodes used)
//! rather than a scan of the cluster; a job that cannot fit anywhere is refused in O(1) from the totals.

use crate::cluster::{GpuModelTag, NodeId};
use crate::flavours::{FlavourBudgets, FlavourMap};
use crate::plan::{Placement, Role, TaskPlacement, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use std::collections::BTreeSet;

/// How a gang's workers are spread over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// On as few nodes as the job's GPUs need, or not at all (Tiresias, for high-skew models).
    Consolidate,
    /// Best fit when the job fits on one node, else most-free nodes first.
    Relaxed,
}

#[derive(Debug, Clone)]
struct NodeFree {
    /// Bit `i` set: GPU `i` is free (nodes have at most 64 GPUs).
    gpu_free: u64,
    free_gpus: u32,
    free_cpus: u32,
    /// Host memory not held by a task, in GB.
    free_memory_gb: u32,
    schedulable: bool,
}

/// What placement needs to know of a node beyond what is free on it, to tell which jobs may run
/// there at all (an image, a node selector, GPU types): shared by every copy of a
/// [`FreeResources`], and made only when some job of the snapshot is so constrained.
#[derive(Debug)]
struct Traits {
    runs_images: bool,
    labels: std::collections::BTreeMap<String, String>,
    /// The distinct models of its GPUs.
    models: Vec<String>,
    /// Its GPUs' model as a tag ([`crate::cluster::Node::gpu_tag`]).
    tag: GpuModelTag,
    taints: Vec<crate::cluster::Taint>,
}

/// Which of a job's GPU models a placement may use.
#[derive(Debug, Clone, Copy)]
enum Only<'a> {
    /// Any the job accepts.
    Any,
    /// The model of this name (one of the job's `gpu_types`).
    Named(&'a str),
    /// The model of this tag, where the job accepts it.
    Tag(GpuModelTag),
}

impl Traits {
    fn of(node: &crate::cluster::Node) -> Traits {
        let mut models: Vec<String> = Vec::new();
        for gpu in &node.gpus {
            if !models.contains(&gpu.model) {
                models.push(gpu.model.clone());
            }
        }
        Traits {
            runs_images: node.runs_images,
            labels: node.labels.clone(),
            models,
            tag: node.gpu_tag(),
            taints: node.taints.clone(),
        }
    }

    /// As [`JobView::may_run_on`], and with GPUs of model `only` when given.
    fn admit(&self, job: &JobView, only: Only) -> bool {
        let all_are = |name: &str| {
            !self.models.is_empty()
                && self
                    .models
                    .iter()
                    .all(|m| crate::cluster::model_is(m, name))
        };
        (!job.image || self.runs_images)
            && job.tolerates_all(&self.taints)
            && job
                .node_selector
                .iter()
                .all(|(key, value)| self.labels.get(key) == Some(value))
            && match only {
                Only::Named(name) => all_are(name),
                Only::Tag(tag) => {
                    self.tag == tag
                        && (job.gpu_types.is_empty() || job.gpu_types.iter().any(|t| all_are(t)))
                }
                Only::Any => job.gpu_types.is_empty() || job.gpu_types.iter().any(|t| all_are(t)),
            }
    }
}

/// What is left of the cluster as a plan is built.
#[derive(Debug, Clone)]
pub struct FreeResources {
    nodes: Vec<NodeFree>,
    /// `buckets[k]`: schedulable nodes with exactly `k` free GPUs.
    buckets: Vec<BTreeSet<u32>>,
    free_gpus: u32,
    free_cpus: u32,
    free_memory_gb: u64,
    max_node_gpus: u32,
    /// CPUs kept on a node for each of its free GPUs' workers when PS shards are placed: the most
    /// any job in the snapshot gives a worker per GPU. A PS costs no GPU, so without this a job's
    /// shards could take every CPU on the nodes whose GPUs are free, and a waiting single-GPU job
    /// would find GPUs but nowhere to run.
    cpus_per_free_gpu: u32,
    /// Per node, what tells which jobs may run there; `None` when no job of the snapshot may run
    /// on some nodes only and no node is tainted (then nothing is spent on it).
    traits: Option<std::sync::Arc<[Traits]>>,
    /// Some node is tainted: the nodes a job may run on may be fewer than all.
    tainted: bool,
    /// On a cluster of several GPU models: free GPUs and CPUs of the schedulable nodes of each.
    model_free: Vec<(GpuModelTag, u32, u32)>,
    /// Where some tenant has a quota per GPU model: what each holds of each, so a gang never takes
    /// its tenant past one, nor GPUs another tenant keeps for itself.
    flavours: Option<FlavourBudgets>,
}

impl FreeResources {
    /// The whole cluster, empty.
    pub fn empty_cluster(snapshot: &ClusterSnapshot) -> Self {
        let mut free = Self::unbucketed(snapshot);
        free.build_buckets();
        free
    }

    fn unbucketed(snapshot: &ClusterSnapshot) -> Self {
        let max_node_gpus = snapshot
            .nodes
            .iter()
            .map(|n| n.num_gpus().min(64))
            .max()
            .unwrap_or(0);
        // One pass over the jobs for both: this runs many times a round.
        let mut cpus_per_free_gpu = 0;
        let mut constrained = false;
        for job in &snapshot.jobs {
            if job.gpus_per_worker > 0 {
                cpus_per_free_gpu =
                    cpus_per_free_gpu.max(job.cpus_per_worker.div_ceil(job.gpus_per_worker));
            }
            constrained |= job.is_constrained();
        }
        let mut free = FreeResources {
            nodes: Vec::with_capacity(snapshot.nodes.len()),
            buckets: Vec::new(),
            free_gpus: 0,
            free_cpus: 0,
            free_memory_gb: 0,
            max_node_gpus,
            cpus_per_free_gpu,
            traits: None,
            tainted: false,
            model_free: Vec::new(),
            flavours: None,
        };
        let mut tainted = false;
        // Several GPU models: a gang may be kept to one ([`FreeResources::place_preferring`]).
        let mut mixed = false;
        let first_model = snapshot
            .nodes
            .iter()
            .find_map(|n| n.gpus.first())
            .map(|g| g.model.as_str());
        for node in &snapshot.nodes {
            tainted |= !node.taints.is_empty();
            mixed |= node.gpus.first().is_some_and(|g| {
                first_model.is_some_and(|first| !g.model.eq_ignore_ascii_case(first))
            });
            let gpus = node.num_gpus().min(64);
            let entry = NodeFree {
                gpu_free: if gpus == 64 {
                    u64::MAX
                } else {
                    (1u64 << gpus) - 1
                },
                free_gpus: gpus,
                free_cpus: node.cpus,
                free_memory_gb: node.memory_gb,
                schedulable: node.schedulable,
            };
            if node.schedulable {
                free.free_gpus += entry.free_gpus;
                free.free_cpus += entry.free_cpus;
                free.free_memory_gb += u64::from(entry.free_memory_gb);
            }
            free.nodes.push(entry);
        }
        free.tainted = tainted;
        if let Some(map) = FlavourMap::of(snapshot) {
            let nodes = &free.nodes;
            free.flavours = Some(FlavourBudgets::new(map, |n| {
                if nodes[n].schedulable {
                    nodes[n].free_gpus
                } else {
                    0
                }
            }));
        }
        if constrained || tainted || mixed {
            let traits: std::sync::Arc<[Traits]> = snapshot.nodes.iter().map(Traits::of).collect();
            if mixed {
                for (node, t) in free.nodes.iter().zip(traits.iter()) {
                    if !node.schedulable {
                        continue;
                    }
                    match free.model_free.iter_mut().find(|f| f.0 == t.tag) {
                        Some(f) => {
                            f.1 += node.free_gpus;
                            f.2 += node.free_cpus;
                        }
                        None => free
                            .model_free
                            .push((t.tag, node.free_gpus, node.free_cpus)),
                    }
                }
            }
            free.traits = Some(traits);
        }
        free
    }

    fn build_buckets(&mut self) {
        let mut buckets = vec![Vec::new(); self.max_node_gpus as usize + 1];
        for (i, node) in self.nodes.iter().enumerate() {
            if node.schedulable {
                buckets[node.free_gpus as usize].push(i as u32);
            }
        }
        // Nodes come in id order, so every bucket is built from sorted input.
        self.buckets = buckets.into_iter().map(BTreeSet::from_iter).collect();
    }

    /// The cluster minus the placements of the running jobs `keep` selects.
    pub fn with_running(
        snapshot: &ClusterSnapshot,
        mut keep: impl FnMut(usize, &JobView) -> bool,
    ) -> Self {
        let mut free = Self::unbucketed(snapshot);
        for (i, job) in snapshot.jobs.iter().enumerate() {
            if let Some(placement) = &job.placement
                && keep(i, job)
            {
                for task in &placement.tasks {
                    free.take_task(job.tenant, task);
                }
            }
        }
        free.build_buckets();
        free
    }

    /// The cluster minus `placements` (each with its job, whose tenant's flavour budgets it counts
    /// against): what a plan's placements leave.
    pub fn with_placements<'a>(
        snapshot: &ClusterSnapshot,
        placements: impl IntoIterator<Item = (&'a JobView, &'a Placement)>,
    ) -> Self {
        let mut free = Self::unbucketed(snapshot);
        for (job, placement) in placements {
            for task in &placement.tasks {
                free.take_task(job.tenant, task);
            }
        }
        free.build_buckets();
        free
    }

    /// Free CPUs on one node.
    pub fn free_cpus_on(&self, node: NodeId) -> u32 {
        self.nodes
            .get(node.0 as usize)
            .map_or(0, |n| if n.schedulable { n.free_cpus } else { 0 })
    }

    /// Free host memory on one node, GB.
    pub fn free_memory_on(&self, node: NodeId) -> u32 {
        self.nodes
            .get(node.0 as usize)
            .map_or(0, |n| if n.schedulable { n.free_memory_gb } else { 0 })
    }

    /// Free GPUs on one node.
    pub fn free_gpus_on(&self, node: NodeId) -> u32 {
        self.nodes
            .get(node.0 as usize)
            .map_or(0, |n| if n.schedulable { n.free_gpus } else { 0 })
    }

    pub fn free_gpus(&self) -> u32 {
        self.free_gpus
    }

    pub fn free_cpus(&self) -> u32 {
        self.free_cpus
    }

    /// Free host memory on schedulable nodes, in GB.
    pub fn free_memory_gb(&self) -> u64 {
        self.free_memory_gb
    }

    fn rebucket(&mut self, node: usize, before: u32) {
        let entry = &self.nodes[node];
        if entry.schedulable {
            self.buckets[before as usize].remove(&(node as u32));
            self.buckets[entry.free_gpus as usize].insert(node as u32);
        }
    }

    /// Marks `job`'s placement's resources used. Packed GPUs already held by another job are not
    /// counted twice.
    pub fn take(&mut self, job: &JobView, placement: &Placement) {
        for task in &placement.tasks {
            let node = task.node.0 as usize;
            let Some(before) = self.nodes.get(node).map(|n| n.free_gpus) else {
                continue;
            };
            self.take_task(job.tenant, task);
            self.rebucket(node, before);
        }
    }

    fn take_task(&mut self, tenant: u32, task: &TaskPlacement) {
        let Some(entry) = self.nodes.get_mut(task.node.0 as usize) else {
            return;
        };
        let mut gpus = 0;
        for &gpu in &task.gpus {
            let bit = 1u64.checked_shl(u32::from(gpu)).unwrap_or(0);
            if entry.gpu_free & bit != 0 {
                entry.gpu_free &= !bit;
                entry.free_gpus -= 1;
                gpus += 1;
            }
        }
        let cpus = task.cpus.min(entry.free_cpus);
        entry.free_cpus -= cpus;
        let memory = task.memory_gb.min(entry.free_memory_gb);
        entry.free_memory_gb -= memory;
        if let Some(flavours) = &mut self.flavours
            && !task.gpus.is_empty()
        {
            let newly = if entry.schedulable { gpus } else { 0 };
            flavours.took(tenant, task.node.0 as usize, task.gpus.len() as u32, newly);
        }
        if entry.schedulable {
            self.free_gpus -= gpus;
            self.free_cpus -= cpus;
            self.free_memory_gb -= u64::from(memory);
            if !self.model_free.is_empty()
                && let Some(tag) = self
                    .traits
                    .as_ref()
                    .and_then(|t| t.get(task.node.0 as usize))
                    .map(|t| t.tag)
                && let Some(free) = self.model_free.iter_mut().find(|f| f.0 == tag)
            {
                free.1 -= gpus;
                free.2 -= cpus;
            }
        }
    }

    /// Takes exactly these resources for `job` if every one is still free (a running job keeping its
    /// place).
    pub fn try_take_exact(&mut self, job: &JobView, placement: &Placement) -> bool {
        // (node, CPUs, memory) the placement takes there.
        let mut by_node: Vec<(u32, u32, u32)> = Vec::new();
        for task in &placement.tasks {
            let Some(entry) = self.nodes.get(task.node.0 as usize) else {
                return false;
            };
            if task
                .gpus
                .iter()
                .any(|&g| entry.gpu_free & 1u64.checked_shl(u32::from(g)).unwrap_or(0) == 0)
            {
                return false;
            }
            match by_node.iter_mut().find(|(n, _, _)| *n == task.node.0) {
                Some((_, cpus, memory)) => {
                    *cpus += task.cpus;
                    *memory += task.memory_gb;
                }
                None => by_node.push((task.node.0, task.cpus, task.memory_gb)),
            }
        }
        if by_node.iter().any(|&(n, cpus, memory)| {
            let node = &self.nodes[n as usize];
            node.free_cpus < cpus || node.free_memory_gb < memory
        }) {
            return false;
        }
        self.take(job, placement);
        true
    }

    /// Whether node `n` may run `job` at all (and, given `only`, has GPUs of that model). Without
    /// traits (no job of the snapshot was constrained) only an unconstrained job may.
    fn admits(&self, n: usize, job: &JobView, only: Only) -> bool {
        match &self.traits {
            Some(traits) => traits.get(n).is_some_and(|t| t.admit(job, only)),
            None => !job.is_constrained(),
        }
    }

    /// Places a gang of `shape` for `job`, or says why it cannot. A job that names several GPU
    /// types goes on the first of them that can hold the whole gang now: a gang never mixes models.
    pub fn place(
        &mut self,
        job: &JobView,
        shape: Shape,
        strategy: Strategy,
    ) -> Result<Placement, WaitReason> {
        if job.gpu_types.len() > 1 && job.gpus_per_worker > 0 {
            let mut last = WaitReason::EligibleNodesBusy;
            for model in &job.gpu_types {
                match self.place_only(job, shape, strategy, Only::Named(model)) {
                    Ok(placement) => return Ok(placement),
                    Err(reason) => last = reason,
                }
            }
            return Err(last);
        }
        self.place_only(job, shape, strategy, Only::Any)
    }

    /// Places a gang of `shape` for `job` all on GPUs of one model, trying `models` in order (those
    /// the job does not accept are skipped), or says why it cannot.
    pub fn place_preferring(
        &mut self,
        job: &JobView,
        shape: Shape,
        strategy: Strategy,
        models: &[GpuModelTag],
    ) -> Result<Placement, WaitReason> {
        if job.gpus_per_worker == 0 || models.is_empty() {
            return self.place(job, shape, strategy);
        }
        // What each model's nodes that may run the job have free, in one pass for all of them.
        let mut by_model: Vec<(GpuModelTag, u32, u32)> =
            models.iter().map(|&m| (m, 0, 0)).collect();
        if !job.is_constrained() && !self.tainted && !self.model_free.is_empty() {
            // Every node may run it: what each model has free is kept as placements are made.
            for entry in &mut by_model {
                if let Some(free) = self.model_free.iter().find(|f| f.0 == entry.0) {
                    (entry.1, entry.2) = (free.1, free.2);
                }
            }
        } else if let Some(traits) = &self.traits {
            for (n, node) in self.nodes.iter().enumerate() {
                let Some(t) = traits.get(n) else {
                    continue;
                };
                if !node.schedulable || !t.admit(job, Only::Any) {
                    continue;
                }
                if let Some(entry) = by_model.iter_mut().find(|(m, _, _)| *m == t.tag) {
                    entry.1 += node.free_gpus;
                    entry.2 += node.free_cpus;
                }
            }
        }
        // Short of it in the whole cluster: so on every model.
        self.cluster_holds(job, shape)?;
        let gpus = shape.workers * job.gpus_per_worker;
        // Its workers' CPUs must be on the model's nodes; PS shards may go on any node.
        let worker_cpus = shape.workers * job.cpus_per_worker;
        let mut last = WaitReason::EligibleNodesBusy;
        for (model, free_gpus, free_cpus) in by_model {
            if self.traits.is_some() && (gpus > free_gpus || worker_cpus > free_cpus) {
                last = WaitReason::EligibleNodesBusy;
                continue;
            }
            match self.place_only(job, shape, strategy, Only::Tag(model)) {
                Ok(placement) => return Ok(placement),
                Err(reason) => last = reason,
            }
        }
        Err(last)
    }

    /// Whether the cluster as a whole has the GPUs, CPUs and host memory `job` takes at `shape`, or
    /// which it is short of (O(1), from the totals).
    fn cluster_holds(&self, job: &JobView, shape: Shape) -> Result<(), WaitReason> {
        if job.gpus_at(shape) > self.free_gpus {
            Err(WaitReason::InsufficientGpus)
        } else if job.cpus_at(shape) > self.free_cpus {
            Err(WaitReason::InsufficientCpus)
        } else if job.memory_gb_at(shape) > self.free_memory_gb {
            Err(WaitReason::InsufficientMemory)
        } else {
            Ok(())
        }
    }

    /// [`FreeResources::place`] on the nodes `job` may run on, of GPU model `only` when given.
    fn place_only(
        &mut self,
        job: &JobView,
        shape: Shape,
        strategy: Strategy,
        only: Only,
    ) -> Result<Placement, WaitReason> {
        self.cluster_holds(job, shape)?;
        let per_worker_gpus = job.gpus_per_worker;
        let gpus = shape.workers * per_worker_gpus;
        let cpus = job.cpus_at(shape);
        // Only the nodes it may run on count (a pass over the cluster, for such jobs only; a job
        // kept to one model of a mixed cluster finds out below, as it looks for nodes).
        let blocked = self
            .flavours
            .as_ref()
            .map(|f| f.blocked(job.tenant, gpus))
            .unwrap_or_default();
        let narrowed = job.is_constrained()
            || (self.tainted && matches!(only, Only::Any))
            || !blocked.flavours.is_empty();
        if narrowed {
            // (GPUs, CPUs) free on the nodes it may run on, and GPUs there of models its tenant's
            // quota keeps it from (their CPUs still count: its PS shards may go there).
            let (free_gpus, free_cpus, barred_gpus) = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(i, n)| n.schedulable && self.admits(*i, job, only))
                .fold((0, 0, 0), |(g, c, b), (i, n)| {
                    if self.barred(i, &blocked.flavours) {
                        (g, c + n.free_cpus, b + n.free_gpus)
                    } else {
                        (g + n.free_gpus, c + n.free_cpus, b)
                    }
                });
            if gpus > free_gpus || cpus > free_cpus {
                return Err(if blocked.by_own_max && gpus <= free_gpus + barred_gpus {
                    WaitReason::TenantLimit
                } else {
                    WaitReason::EligibleNodesBusy
                });
            }
        }
        let worker_nodes =
            self.choose_worker_nodes(job, shape.workers, strategy, only, &blocked.flavours)?;
        let ps_nodes = self.choose_ps_nodes(job, shape.ps, &worker_nodes)?;
        let mut tasks = Vec::with_capacity((shape.workers + shape.ps) as usize);
        let mut index = 0;
        for &(node, count) in &worker_nodes {
            for _ in 0..count {
                let mut available = self.nodes[node as usize].gpu_free;
                for task in tasks.iter().filter(|t: &&TaskPlacement| t.node.0 == node) {
                    for &g in &task.gpus {
                        available &= !(1u64 << g);
                    }
                }
                let mut gpus = Vec::with_capacity(per_worker_gpus as usize);
                while gpus.len() < per_worker_gpus as usize && available != 0 {
                    let g = available.trailing_zeros();
                    gpus.push(g as u16);
                    available &= !(1u64 << g);
                }
                tasks.push(TaskPlacement {
                    role: Role::Worker,
                    index,
                    node: NodeId(node),
                    gpus,
                    cpus: job.cpus_per_worker,
                    memory_gb: job.memory_gb_per_task,
                    packed: false,
                });
                index += 1;
            }
        }
        for (i, node) in ps_nodes.into_iter().enumerate() {
            tasks.push(TaskPlacement {
                role: Role::Ps,
                index: i as u32,
                node: NodeId(node),
                gpus: Vec::new(),
                cpus: job.cpus_per_ps,
                memory_gb: job.memory_gb_per_task,
                packed: false,
            });
        }
        let placement = Placement { tasks };
        self.take(job, &placement);
        Ok(placement)
    }

    /// Whether `job`'s tenant may hold `gpus` more GPUs on node `n` by its maxima per GPU model
    /// (packing onto a GPU already in use).
    pub fn within_model_maxima(&self, job: &JobView, node: NodeId, gpus: u32) -> bool {
        self.flavours
            .as_ref()
            .is_none_or(|f| f.within_maxima(job.tenant, node.0 as usize, gpus))
    }

    /// Whether node `n` is of a GPU model in `blocked` ([`FlavourBudgets::blocked`]).
    fn barred(&self, n: usize, blocked: &[u16]) -> bool {
        !blocked.is_empty()
            && self
                .flavours
                .as_ref()
                .is_some_and(|f| f.node_blocked(n, blocked))
    }

    /// (node, workers) pairs for the gang's workers, without changing anything.
    fn choose_worker_nodes(
        &self,
        job: &JobView,
        workers: u32,
        strategy: Strategy,
        only: Only,
        blocked: &[u16],
    ) -> Result<Vec<(u32, u32)>, WaitReason> {
        let g = job.gpus_per_worker;
        let c = job.cpus_per_worker;
        let m = job.memory_gb_per_task;
        let unit = job.worker_unit.max(1);
        if !workers.is_multiple_of(unit) || !workers.is_multiple_of(job.worker_step.max(1)) {
            // A shape the job cannot run at (not whole replicas, or groups that would straddle
            // nodes).
            return Err(WaitReason::Fragmented);
        }
        // Decided once, not per node: this closure is the hottest loop of a round.
        let traits = match &self.traits {
            None if job.is_constrained() => return Err(WaitReason::EligibleNodesBusy),
            None => None,
            Some(traits) => Some(traits),
        };
        let fits_on = |n: u32| -> u32 {
            if let Some(traits) = traits
                && !traits[n as usize].admit(job, only)
            {
                return 0;
            }
            if self.barred(n as usize, blocked) {
                return 0;
            }
            let node = &self.nodes[n as usize];
            let by_gpu = node.free_gpus.checked_div(g).unwrap_or(u32::MAX);
            let by_cpu = node.free_cpus.checked_div(c).unwrap_or(u32::MAX);
            let by_memory = node.free_memory_gb.checked_div(m).unwrap_or(u32::MAX);
            // Whole tensor-parallel groups only.
            let fits = by_gpu.min(by_cpu).min(by_memory);
            fits - fits % unit
        };
        if g == 0 {
            // CPU-only workers: most free CPUs first.
            let mut order: Vec<u32> = (0..self.nodes.len() as u32)
                .filter(|&n| self.nodes[n as usize].schedulable)
                .collect();
            order.sort_by_key(|&n| (std::cmp::Reverse(self.nodes[n as usize].free_cpus), n));
            return take_in_order(order.into_iter(), workers, fits_on);
        }
        let need = workers * g;
        // Best fit on a single node: the fullest node that still holds the whole gang.
        if need <= self.max_node_gpus {
            for bucket in need..=self.max_node_gpus {
                for &node in &self.buckets[bucket as usize] {
                    if fits_on(node) >= workers {
                        return Ok(vec![(node, workers)]);
                    }
                }
            }
        }
        // Across nodes, most free first.
        let order = (1..=self.max_node_gpus)
            .rev()
            .flat_map(|b| self.buckets[b as usize].iter().copied());
        let chosen = take_in_order(order, workers, fits_on)?;
        if strategy == Strategy::Consolidate && self.max_node_gpus > 0 {
            let fewest = need.div_ceil(self.max_node_gpus) as usize;
            if chosen.len() > fewest {
                return Err(WaitReason::Fragmented);
            }
        }
        Ok(chosen)
    }

    /// Nodes for the PS shards. First only CPUs no free GPU needs for its worker (see
    /// [`FreeResources::cpus_per_free_gpu`]): the workers' nodes round-robin (less cross-node traffic),
    /// then the other nodes with the most such CPUs. Shards still left go wherever CPUs are free, on
    /// the nodes with the fewest free GPUs first, so a shape that fits is never refused.
    fn choose_ps_nodes(
        &self,
        job: &JobView,
        shards: u32,
        worker_nodes: &[(u32, u32)],
    ) -> Result<Vec<u32>, WaitReason> {
        if shards == 0 {
            return Ok(Vec::new());
        }
        let per_ps = job.cpus_per_ps;
        let memory = job.memory_gb_per_task;
        // (node, free CPUs, free GPUs, free memory) once this job's workers are placed.
        let mut nodes: Vec<(u32, u32, u32, u32)> = worker_nodes
            .iter()
            .map(|&(node, workers)| {
                let entry = &self.nodes[node as usize];
                (
                    node,
                    entry
                        .free_cpus
                        .saturating_sub(workers * job.cpus_per_worker),
                    entry
                        .free_gpus
                        .saturating_sub(workers * job.gpus_per_worker),
                    entry.free_memory_gb.saturating_sub(workers * memory),
                )
            })
            .collect();
        let spare = |&(_, cpus, gpus, _): &(u32, u32, u32, u32)| {
            cpus.saturating_sub(gpus * self.cpus_per_free_gpu)
        };
        let holds = |slot: &(u32, u32, u32, u32), cpus: u32| cpus >= per_ps && slot.3 >= memory;
        let workers_nodes = nodes.len();
        let mut chosen = Vec::with_capacity(shards as usize);
        let take = |slot: &mut (u32, u32, u32, u32), chosen: &mut Vec<u32>| {
            slot.1 -= per_ps;
            slot.3 -= memory;
            chosen.push(slot.0);
        };
        // The workers' nodes in turn, within their spare CPUs.
        let mut stalled = 0;
        let mut i = 0;
        while chosen.len() < shards as usize && workers_nodes > 0 && stalled < workers_nodes {
            let slot = &mut nodes[i % workers_nodes];
            if holds(slot, spare(slot)) {
                take(slot, &mut chosen);
                stalled = 0;
            } else {
                stalled += 1;
            }
            i += 1;
        }
        if chosen.len() == shards as usize {
            return Ok(chosen);
        }
        // The other nodes, most spare CPUs first (only now: listing them costs a pass over the
        // cluster, which most gangs' shards never need).
        let mut others: Vec<(u32, u32, u32, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(n, node)| {
                node.schedulable
                    && self.admits(*n, job, Only::Any)
                    && !worker_nodes.iter().any(|w| w.0 == *n as u32)
            })
            .map(|(n, node)| {
                (
                    n as u32,
                    node.free_cpus,
                    node.free_gpus,
                    node.free_memory_gb,
                )
            })
            .collect();
        others.sort_by_key(|other| (std::cmp::Reverse(spare(other)), other.0));
        nodes.extend(others);
        for slot in &mut nodes[workers_nodes..] {
            while holds(slot, spare(slot)) && chosen.len() < shards as usize {
                take(slot, &mut chosen);
            }
        }
        // Whatever CPUs are left, taking from the fewest free GPUs first.
        if chosen.len() < shards as usize {
            nodes.sort_by_key(|&(n, _, gpus, _)| (gpus, n));
            for slot in &mut nodes {
                while holds(slot, slot.1) && chosen.len() < shards as usize {
                    take(slot, &mut chosen);
                }
            }
        }
        if chosen.len() < shards as usize {
            Err(if nodes.iter().any(|slot| slot.1 >= per_ps) {
                WaitReason::InsufficientMemory
            } else {
                WaitReason::InsufficientCpus
            })
        } else {
            Ok(chosen)
        }
    }
}

fn take_in_order(
    order: impl Iterator<Item = u32>,
    workers: u32,
    capacity: impl Fn(u32) -> u32,
) -> Result<Vec<(u32, u32)>, WaitReason> {
    let mut remaining = workers;
    let mut chosen = Vec::new();
    for node in order {
        if remaining == 0 {
            break;
        }
        let take = capacity(node).min(remaining);
        if take > 0 {
            chosen.push((node, take));
            remaining -= take;
        }
    }
    if remaining == 0 {
        Ok(chosen)
    } else {
        Err(WaitReason::Fragmented)
    }
}
