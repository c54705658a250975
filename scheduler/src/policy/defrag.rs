//! Making room on one node for an admitted job that must sit on one node.
//!
//! The elastic allocation counts GPUs cluster-wide, so it can admit a consolidated job (a high-skew
//! model whose workers should share a node) while every node's free GPUs are too few: the job then
//! waits round after round with [`WaitReason::Fragmented`], though the GPUs it was given exist. Jobs
//! later in the order hold GPUs on the nodes. On the node where the least must go, grown jobs give
//! workers back (as a grow-shrink policy gives GPUs back when others wait) and, where that is not
//! enough, jobs are preempted, as they would be for any job ahead of them in the order: otherwise
//! the freed GPUs, scattered over the nodes, are taken again and a job of a 8-GPU node's size can
//! wait for hours ([`make_room`]).
//!
//! Where that frees nothing (the jobs in the way are ahead of it), the cluster is compacted
//! ([`compact`]): jobs on one node move to GPUs free elsewhere, each keeping its shape and its GPU
//! model, so that the waiting job — a consolidated one, or one whose workers each need more GPUs than
//! any node has free — runs there. A move costs the moved job a checkpoint and a restart, nothing
//! of its share; a job is moved only once it has run a while where it is.
//!
//! A job can also find GPUs free only on nodes whose CPUs later jobs' PS shards hold: those jobs give
//! shards back ([`make_cpu_room`]).

use super::common::min_shape;
use super::tiresias::Tiresias;
use crate::cluster::NodeId;
use crate::place::FreeResources;
use crate::place::Strategy;
use crate::plan::{JobPlan, Placement, Plan, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, Shape};
use std::collections::BTreeMap;

/// Shrinks or clears the targets of jobs later in `order` so that each admitted, consolidated job
/// `plan` left waiting as fragmented finds one node with its smallest shape's GPUs once placement is
/// re-run. Returns whether any target changed. Only jobs running at their target change: those above
/// their smallest shape give workers back (down to no less than it) before any preemptible one is
/// preempted; one node serves one waiting job.
pub fn make_room(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &mut [Option<Shape>],
    plan: &Plan,
    free: &FreeResources,
) -> bool {
    let rank = ranks(order, snapshot.jobs.len());
    let max_node_gpus = snapshot
        .nodes
        .iter()
        .map(|n| n.num_gpus())
        .max()
        .unwrap_or(0);
    let mut claimed: Vec<u32> = Vec::new();
    let mut changed = false;
    for &s in order {
        let job = &snapshot.jobs[s];
        let stuck = job.consolidate
            && job.placement.is_none()
            && targets[s].is_some()
            && matches!(
                plan.jobs.get(&job.id),
                Some(JobPlan::Wait {
                    reason: WaitReason::Fragmented
                })
            );
        let need = job.gpus_at(min_shape(job));
        if !stuck || need == 0 || need > max_node_gpus {
            continue;
        }
        // The GPUs that jobs later in the order hold at their target shape, per node, latest first.
        let mut holders: BTreeMap<NodeId, Vec<(usize, Vec<u16>)>> = BTreeMap::new();
        for &j in order.iter().rev() {
            if rank[j] <= rank[s] {
                break;
            }
            let Some(placement) = &snapshot.jobs[j].placement else {
                continue;
            };
            if targets[j] != Some(placement.shape()) {
                continue;
            }
            for task in placement.tasks.iter().filter(|t| !t.gpus.is_empty()) {
                let on_node = holders.entry(task.node).or_default();
                match on_node.last_mut() {
                    Some((last, gpus)) if *last == j => gpus.extend(&task.gpus),
                    _ => on_node.push((j, task.gpus.clone())),
                }
            }
        }
        // The node where freeing room for the job takes the least.
        let mut best: Option<Room> = None;
        for (&node, holders) in &holders {
            let usable = snapshot
                .nodes
                .get(node.0 as usize)
                .is_some_and(|n| n.schedulable && job.may_run_on(n) && n.num_gpus() >= need);
            if !usable || claimed.contains(&node.0) {
                continue;
            }
            let Some(room) = room_on(snapshot, targets, free, holders, node, need) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| room.cost() < b.cost()) {
                best = Some(room);
            }
        }
        let Some(room) = best else {
            continue;
        };
        claimed.push(room.node.0);
        for (j, give) in room.shrink {
            if let Some(target) = targets[j].as_mut() {
                target.workers -= give;
                changed = true;
            }
        }
        for j in room.preempt {
            targets[j] = None;
            changed = true;
        }
    }
    changed
}

/// What freeing a node for a waiting job takes: jobs later in the order that give workers back
/// (job, workers), and jobs that are preempted, the latest in the order first.
struct Room {
    node: NodeId,
    shrink: Vec<(usize, u32)>,
    preempt: Vec<usize>,
}

impl Room {
    /// Fewest jobs preempted, then fewest resized.
    fn cost(&self) -> (usize, usize) {
        (self.preempt.len(), self.shrink.len())
    }
}

/// How `node` could take the smallest shape (`need` GPUs) of the stuck job `s`, or `None` if jobs
/// later in the order cannot free enough of it. Every job whose target changes is placed again after
/// `s`, so all its GPUs there are free when `s` is placed; a GPU two jobs share is free once both go.
/// Grown jobs give workers back first (they keep running); only if that is not enough are jobs
/// preempted, the latest in the order first.
fn room_on(
    snapshot: &ClusterSnapshot,
    targets: &[Option<Shape>],
    free: &FreeResources,
    holders: &[(usize, Vec<u16>)],
    node: NodeId,
    need: u32,
) -> Option<Room> {
    let free_here = free.free_gpus_on(node);
    if free_here >= need {
        return None;
    }
    // A GPU is freed once every job holding it here has gone.
    let freed = |released: &[usize]| -> u32 {
        let mut held: Vec<u16> = Vec::new();
        let mut kept: Vec<u16> = Vec::new();
        for (j, gpus) in holders {
            let target = if released.contains(j) {
                &mut held
            } else {
                &mut kept
            };
            target.extend(gpus);
        }
        held.sort_unstable();
        held.dedup();
        held.retain(|g| !kept.contains(g));
        held.len() as u32
    };
    let mut released: Vec<usize> = Vec::new();
    let mut shrink = Vec::new();
    for &(j, _) in holders {
        if free_here + freed(&released) >= need {
            break;
        }
        if let Some(workers) = shrinkable_on(snapshot, targets, j, node) {
            released.push(j);
            shrink.push((j, workers));
        }
    }
    let mut preempt = Vec::new();
    for &(j, _) in holders {
        if free_here + freed(&released) >= need {
            break;
        }
        if !released.contains(&j) && snapshot.jobs[j].preemptible {
            released.push(j);
            preempt.push(j);
        }
    }
    if free_here + freed(&released) < need {
        return None;
    }
    // A grown job gives back what the waiting job needs of it, no more than it may.
    let mut short = need - free_here;
    let shrink = shrink
        .into_iter()
        .map(|(j, workers)| {
            let per = snapshot.jobs[j].gpus_per_worker.max(1);
            let give = workers.min(short.div_ceil(per)).max(1);
            short = short.saturating_sub(give * per);
            (j, give)
        })
        .collect();
    Some(Room {
        node,
        shrink,
        preempt,
    })
}

/// Workers job `j` could give back on `node`: it runs there at its target, above its smallest shape.
fn shrinkable_on(
    snapshot: &ClusterSnapshot,
    targets: &[Option<Shape>],
    j: usize,
    node: NodeId,
) -> Option<u32> {
    let job = &snapshot.jobs[j];
    let placement = job.placement.as_ref()?;
    let target = targets[j]?;
    // A model-parallel job gives back whole replicas or nothing: not shrunk a worker at a time.
    if placement.shape() != target
        || !job.preemptible
        || job.gpus_per_worker == 0
        || job.worker_step > 1
    {
        return None;
    }
    let here = placement
        .tasks
        .iter()
        .filter(|t| t.node == node && !t.gpus.is_empty() && !t.packed)
        .count() as u32;
    let spare = target.workers.saturating_sub(job.workers.min);
    Some(here.min(spare)).filter(|&w| w > 0)
}

/// Seconds a running job must have run (or waited) since it last started or stopped before
/// compaction moves it, so that no job is moved round after round.
const SETTLED_S: f64 = 30.0;
/// Waiting jobs compaction is tried for in one round: each try rebuilds what the plan leaves free.
const COMPACTIONS_PER_ROUND: usize = 2;
/// Nodes tried for each, cheapest first.
const NODES_TRIED: usize = 3;

/// Moves jobs between nodes so that admitted jobs `plan` leaves waiting as fragmented that need one
/// node (consolidated ones, and those whose workers take several GPUs each) run: for each (in
/// `order`, at most [`COMPACTIONS_PER_ROUND`]), on the node where moving the fewest running jobs
/// frees its smallest shape's GPUs, those jobs are placed again on the rest of the cluster at their
/// shape and GPU model, then it is placed. Jobs starting this round move first (they lose
/// nothing); running ones only if preemptible and settled for [`SETTLED_S`]; none whose GPUs are
/// packed. `free` becomes what the changed plan leaves. Returns whether the plan changed.
pub fn compact(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &[Option<Shape>],
    plan: &mut Plan,
    free: &mut FreeResources,
) -> bool {
    let max_node_gpus = snapshot
        .nodes
        .iter()
        .filter(|n| n.schedulable)
        .map(|n| n.num_gpus())
        .max()
        .unwrap_or(0);
    let mut tried = 0;
    let mut changed = false;
    for &s in order {
        if tried == COMPACTIONS_PER_ROUND {
            break;
        }
        let job = &snapshot.jobs[s];
        // Consolidated, or each worker a node's GPUs: a job whose 1-GPU workers may spread waits
        // fragmented only for CPUs or memory, which moving GPUs' jobs does not give it.
        let needs_a_node = job.consolidate || job.gpus_per_worker > 1;
        let stuck = needs_a_node
            && job.placement.is_none()
            && targets[s].is_some()
            && matches!(
                plan.jobs.get(&job.id),
                Some(JobPlan::Wait {
                    reason: WaitReason::Fragmented
                })
            );
        let shape = min_shape(job);
        let need = job.gpus_at(shape);
        if !stuck || need == 0 || need > max_node_gpus {
            continue;
        }
        tried += 1;
        let Some(done) = compaction_for(snapshot, plan, free, s, shape, need) else {
            continue;
        };
        plan.jobs.insert(
            job.id,
            JobPlan::Run {
                placement: done.placement,
                reason: RunReason::Started,
            },
        );
        for (j, placement) in done.moves {
            // One starting this round keeps why it starts; a running one says why it moves.
            let reason = match plan.jobs.get(&snapshot.jobs[j].id) {
                Some(JobPlan::Run { reason, .. }) if snapshot.jobs[j].placement.is_none() => {
                    *reason
                }
                _ => RunReason::Compaction,
            };
            plan.jobs
                .insert(snapshot.jobs[j].id, JobPlan::Run { placement, reason });
        }
        *free = done.free;
        changed = true;
    }
    changed
}

/// A compaction found for one waiting job: its placement, the moved jobs' new placements, and what
/// the plan then leaves free.
struct Compaction {
    placement: Placement,
    moves: Vec<(usize, Placement)>,
    free: FreeResources,
}

/// Jobs (by index) `plan` runs on a node, to move off it: their GPUs there, and whether they run
/// now (a move costs them a restart) rather than start this round.
struct Movers {
    node: NodeId,
    jobs: Vec<usize>,
    restarts: usize,
    gpus: u32,
}

fn compaction_for(
    snapshot: &ClusterSnapshot,
    plan: &Plan,
    free: &FreeResources,
    s: usize,
    shape: Shape,
    need: u32,
) -> Option<Compaction> {
    let job = &snapshot.jobs[s];
    let planned = |i: usize| match plan.jobs.get(&snapshot.jobs[i].id) {
        Some(JobPlan::Run { placement, .. }) => Some(placement),
        _ => None,
    };
    // Per node: the jobs with GPUs there (job, GPUs there), and whether any GPU there is packed.
    let mut on_node: BTreeMap<NodeId, (Vec<(usize, u32)>, bool)> = BTreeMap::new();
    for i in 0..snapshot.jobs.len() {
        let Some(placement) = planned(i) else {
            continue;
        };
        for task in placement.tasks.iter().filter(|t| !t.gpus.is_empty()) {
            let entry = on_node.entry(task.node).or_default();
            entry.1 |= task.packed;
            match entry.0.iter_mut().find(|(j, _)| *j == i) {
                Some((_, gpus)) => *gpus += task.gpus.len() as u32,
                None => entry.0.push((i, task.gpus.len() as u32)),
            }
        }
    }
    let movable = |i: usize| {
        let other = &snapshot.jobs[i];
        match (&other.placement, planned(i)) {
            // Starting this round: placing it elsewhere costs nothing.
            (None, Some(_)) => Some(false),
            (Some(now), Some(planned)) => (now == planned
                && other.preemptible
                && snapshot.now_s - other.observed.last_state_change_s >= SETTLED_S)
                .then_some(true),
            _ => None,
        }
    };
    let mut candidates: Vec<Movers> = Vec::new();
    for (&node, (holders, packed)) in &on_node {
        let usable = snapshot
            .nodes
            .get(node.0 as usize)
            .is_some_and(|n| n.schedulable && job.may_run_on(n) && n.num_gpus() >= need);
        let free_here = free.free_gpus_on(node);
        if !usable || *packed || free_here >= need {
            continue;
        }
        // Those that start this round first, then the fewest GPUs to move.
        let mut holders: Vec<(usize, u32, bool)> = holders
            .iter()
            .filter_map(|&(i, gpus)| movable(i).map(|restart| (i, gpus, restart)))
            .collect();
        holders.sort_by_key(|&(i, gpus, restart)| (restart, gpus, i));
        let mut movers = Movers {
            node,
            jobs: Vec::new(),
            restarts: 0,
            gpus: 0,
        };
        for (i, gpus, restart) in holders {
            if free_here + movers.gpus >= need {
                break;
            }
            movers.jobs.push(i);
            movers.gpus += gpus;
            movers.restarts += usize::from(restart);
        }
        if free_here + movers.gpus >= need {
            candidates.push(movers);
        }
    }
    candidates.sort_by_key(|m| (m.restarts, m.gpus, m.node));
    let several_models = snapshot
        .nodes
        .iter()
        .any(|n| n.gpu_tag() != snapshot.nodes[0].gpu_tag());
    candidates.into_iter().take(NODES_TRIED).find_map(|movers| {
        let mut trial = FreeResources::with_placements(
            snapshot,
            (0..snapshot.jobs.len())
                .filter(|i| !movers.jobs.contains(i))
                .filter_map(|i| planned(i).map(|p| (&snapshot.jobs[i], p))),
        );
        let placement = trial.place(job, shape, Strategy::Consolidate).ok()?;
        let mut moves = Vec::with_capacity(movers.jobs.len());
        for &j in &movers.jobs {
            let other = &snapshot.jobs[j];
            let from = planned(j)?;
            let strategy = Tiresias::strategy(other);
            let to = match from.tasks.iter().find(|t| !t.gpus.is_empty()) {
                Some(task) if several_models => {
                    let model = snapshot.nodes.get(task.node.0 as usize)?.gpu_tag();
                    trial.place_preferring(other, from.shape(), strategy, &[model])
                }
                _ => trial.place(other, from.shape(), strategy),
            }
            .ok()?;
            moves.push((j, to));
        }
        Some(Compaction {
            placement,
            moves,
            free: trial,
        })
    })
}

/// Gives an admitted job that waits with [`WaitReason::Fragmented`] the CPUs it lacks on a node where
/// GPUs are free for it: jobs later in the order give back parameter-server shards they hold there
/// (down to their smallest PS count), and are placed again after it. GPUs free up where a job ends,
/// but the CPUs beside them may be held by other jobs' shards, placed when those GPUs were busy; the
/// job first in the order then waited for CPUs on such nodes: on week 40 (32×8, seed 1) a light
/// tenant's one-GPU job waited 664 s, first in the order, beside two free GPUs whose nodes had no CPU
/// left. Returns whether any target changed; one node serves one waiting job.
pub fn make_cpu_room(
    snapshot: &ClusterSnapshot,
    order: &[usize],
    targets: &mut [Option<Shape>],
    plan: &Plan,
    free: &FreeResources,
) -> bool {
    let rank = ranks(order, snapshot.jobs.len());
    let mut claimed: Vec<NodeId> = Vec::new();
    let mut changed = false;
    for &s in order {
        let job = &snapshot.jobs[s];
        let Some(target) = targets[s] else {
            continue;
        };
        let stuck = job.placement.is_none()
            && matches!(
                plan.jobs.get(&job.id),
                Some(JobPlan::Wait {
                    reason: WaitReason::Fragmented
                })
            );
        let (gpus, cpus) = (job.gpus_at(target), job.cpus_at(target));
        if !stuck || gpus == 0 {
            continue;
        }
        // Shards that jobs later in the order, running at their targets, could give back: per node,
        // (job, shards there, CPUs they hold there), latest in the order first.
        let mut holders: BTreeMap<NodeId, Vec<(usize, u32, u32)>> = BTreeMap::new();
        for &j in order.iter().rev() {
            if rank[j] <= rank[s] {
                break;
            }
            let other = &snapshot.jobs[j];
            let (Some(placement), Some(shape)) = (&other.placement, targets[j]) else {
                continue;
            };
            if shape != placement.shape() || shape.ps <= other.ps.min || !other.preemptible {
                continue;
            }
            for task in placement.tasks.iter().filter(|t| t.gpus.is_empty()) {
                let on_node = holders.entry(task.node).or_default();
                match on_node.iter_mut().find(|(other, _, _)| *other == j) {
                    Some((_, shards, held)) => {
                        *shards += 1;
                        *held += task.cpus;
                    }
                    None => on_node.push((j, 1, task.cpus)),
                }
            }
        }
        // The node where the fewest jobs give shards back.
        let mut best: Option<(NodeId, Vec<(usize, u32)>)> = None;
        for (&node, holders) in &holders {
            let usable = snapshot
                .nodes
                .get(node.0 as usize)
                .is_some_and(|n| n.schedulable && job.may_run_on(n));
            if !usable || claimed.contains(&node) || free.free_gpus_on(node) < gpus {
                continue;
            }
            let mut short = cpus.saturating_sub(free.free_cpus_on(node));
            if short == 0 {
                continue;
            }
            let mut give = Vec::new();
            for &(j, shards, held) in holders {
                let other = &snapshot.jobs[j];
                let spare = targets[j].map_or(0, |t| t.ps - other.ps.min).min(shards);
                let per = held / shards.max(1);
                if spare == 0 || per == 0 {
                    continue;
                }
                let n = spare.min(short.div_ceil(per));
                give.push((j, n));
                short = short.saturating_sub(n * per);
                if short == 0 {
                    break;
                }
            }
            if short == 0 && best.as_ref().is_none_or(|(_, b)| give.len() < b.len()) {
                best = Some((node, give));
            }
        }
        let Some((node, give)) = best else {
            continue;
        };
        claimed.push(node);
        for (j, n) in give {
            if let Some(target) = targets[j].as_mut() {
                target.ps -= n;
                changed = true;
            }
        }
    }
    changed
}

/// Each job's position in `order` (by index; `usize::MAX` for a job not in it).
fn ranks(order: &[usize], jobs: usize) -> Vec<usize> {
    let mut rank = vec![usize::MAX; jobs];
    for (position, &i) in order.iter().enumerate() {
        rank[i] = position;
    }
    rank
}
