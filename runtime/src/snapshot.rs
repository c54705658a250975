//! Building the scheduler's [`ClusterSnapshot`] from the store and the connected executors.
//!
//! Two kinds of jobs are "held": shown to the policy as running where their tasks are, at a fixed shape
//! and not preemptible, with the plan's decision for them ignored:
//! - a job whose tasks are still stopping (preempted, drained, cancelled, failed) keeps its GPUs until
//!   the processes have exited, so no policy hands those GPUs to another job early;
//! - a job with tasks on a node that takes no new tasks (cordoned, or its executor disconnected and not
//!   yet declared lost) keeps running there: the policy could not place it anywhere else in one piece,
//!   and a cordon or a blip in the connection must not preempt what runs.

use super::Observed;
use super::observe::{Budget, ParsedSpec};
use drover_core::{JobId, JobState};
use drover_scheduler::snapshot::{Observations, Range, Tenant as SchedTenant};
use drover_scheduler::{
    ClusterSnapshot, JobView, Node as SchedNode, NodeId, Placement, Role, TaskPlacement,
    cluster::Gpu as SchedGpu,
};
use drover_store::{Job, Node, Task, TaskRole, Tenant};
use std::collections::{BTreeMap, HashMap, HashSet};

pub(super) struct Built<'a> {
    pub snapshot: ClusterSnapshot,
    /// Node index → node name.
    pub node_names: Vec<String>,
    /// Per node: GPU position in the snapshot → the executor's GPU index.
    pub gpu_indices: Vec<Vec<u32>>,
    pub held: HashSet<JobId>,
    pub jobs: HashMap<JobId, &'a Job>,
}

use crate::observe::Seen;

fn seconds(at: chrono::DateTime<chrono::Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

/// The active jobs and their parsed specs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Active<'a> {
    pub jobs: &'a [Job],
    pub specs: &'a HashMap<JobId, ParsedSpec>,
}

pub(super) fn build<'a>(
    now: chrono::DateTime<chrono::Utc>,
    nodes: &[Node],
    connected: &HashMap<String, String>,
    tenants: &[Tenant],
    active: Active<'a>,
    live: &[Task],
    seen: &HashMap<JobId, Seen>,
) -> Built<'a> {
    let Active { jobs, specs } = active;
    let hosting: HashSet<&str> = live.iter().map(|t| t.node_name.as_str()).collect();
    let mut included: Vec<&Node> = nodes
        .iter()
        .filter(|n| connected.contains_key(&n.name) || hosting.contains(n.name.as_str()))
        .collect();
    included.sort_by(|a, b| a.name.cmp(&b.name));
    let node_index: HashMap<&str, u32> = included
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i as u32))
        .collect();
    let mut gpu_indices = Vec::with_capacity(included.len());
    let sched_nodes: Vec<SchedNode> = included
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut gpus = node.gpus.clone();
            gpus.sort_by_key(|g| g.index);
            gpu_indices.push(gpus.iter().map(|g| g.index).collect());
            SchedNode {
                id: NodeId(i as u32),
                name: node.name.clone(),
                rack: 0,
                gpus: gpus
                    .iter()
                    .map(|g| SchedGpu {
                        model: g.model.clone(),
                        memory_gb: g.memory_gb,
                    })
                    .collect(),
                cpus: node.cpus,
                memory_gb: node.memory_gb,
                schedulable: connected.contains_key(&node.name)
                    && node.health == "healthy"
                    && !node.cordoned
                    && !node.draining,
                runs_images: node.runs_images,
                labels: node.labels.clone(),
                taints: node
                    .taints
                    .iter()
                    .map(|t| drover_scheduler::cluster::Taint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                    })
                    .collect(),
            }
        })
        .collect();
    let tenant_index: HashMap<drover_core::TenantId, u32> = tenants
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, i as u32))
        .collect();
    let sched_tenants = tenants
        .iter()
        .map(|t| SchedTenant {
            name: t.name.clone(),
            guaranteed_gpus: t.quota.guaranteed_gpus,
            max_gpus: t.quota.max_gpus,
            flavours: t
                .quota
                .flavours
                .iter()
                .map(|f| drover_scheduler::snapshot::Flavour {
                    gpu_model: f.gpu_model.clone(),
                    guaranteed_gpus: f.guaranteed_gpus,
                    max_gpus: f.max_gpus,
                    lending_limit: f.lending_limit,
                })
                .collect(),
        })
        .collect();

    let mut by_job: BTreeMap<JobId, Vec<&Task>> = BTreeMap::new();
    for task in live {
        by_job.entry(task.key.job_id).or_default().push(task);
    }
    // Each task holds its job's `memory_gb_per_task` (0 for a job whose spec is gone).
    let placement_of = |tasks: &[&Task], memory_gb: u32| -> Option<Placement> {
        let mut placed = Vec::with_capacity(tasks.len());
        for task in tasks {
            let node = *node_index.get(task.node_name.as_str())?;
            let positions: &Vec<u32> = &gpu_indices[node as usize];
            let gpus = task
                .gpus
                .iter()
                .map(|g| {
                    positions
                        .iter()
                        .position(|p| *p == u32::from(*g))
                        .map(|p| p as u16)
                })
                .collect::<Option<Vec<u16>>>()?;
            placed.push(TaskPlacement {
                role: match task.key.role {
                    TaskRole::Worker => Role::Worker,
                    TaskRole::Ps => Role::Ps,
                },
                index: task.key.index,
                node: NodeId(node),
                gpus,
                cpus: task.cpus,
                memory_gb,
                packed: false,
            });
        }
        Some(Placement { tasks: placed })
    };

    let jobs_by_id: HashMap<JobId, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut views = Vec::new();
    let mut held = HashSet::new();
    for job in jobs {
        let Some(ParsedSpec { spec, program }) = specs.get(&job.id) else {
            continue;
        };
        let tasks = by_job.remove(&job.id).unwrap_or_default();
        let resources = &spec.spec.resources;
        let stopping = tasks
            .iter()
            .any(|t| t.stop_requested || t.key.generation != job.generation)
            || (!tasks.is_empty() && job.state == JobState::Queued);
        let pinned = tasks.iter().any(|t| {
            node_index
                .get(t.node_name.as_str())
                .is_none_or(|&i| !sched_nodes[i as usize].schedulable)
        });
        let mut view = JobView {
            tenant: tenant_index.get(&job.tenant_id).copied().unwrap_or(0),
            priority: spec.spec.scheduling.priority,
            submit_s: seconds(job.created_at),
            preemptible: spec.spec.scheduling.preemptible,
            observed: Observations {
                program: *program,
                // A job not measured yet still has its budget (its speed may be borrowed).
                ..match seen.get(&job.id) {
                    Some(seen) => seen.observed.observations(
                        resources.gpus_per_worker,
                        Budget::of(spec),
                        seconds(job.updated_at),
                        seen.last_checkpoint.map(seconds),
                        job.restarts,
                    ),
                    None => Observed::default().observations(
                        resources.gpus_per_worker,
                        Budget::of(spec),
                        seconds(job.updated_at),
                        None,
                        job.restarts,
                    ),
                }
            },
            ..JobView::of_document(job.id, spec)
        };
        view.consolidate = view.observed.prefers_one_node();
        if tasks.is_empty() {
            if job.state == JobState::Queued {
                views.push(view);
            }
            continue;
        }
        let placement = if job.state == JobState::Rescaling {
            // The new generation's tasks hold their resources from the decision on; the old one's
            // workers, until they exit, hold the GPUs the new ones do not reuse.
            let (current, old): (Vec<&Task>, Vec<&Task>) = tasks
                .iter()
                .partition(|t| t.key.generation == job.generation);
            let memory = resources.memory_gb_per_task;
            placement_of(&current, memory)
                .zip(placement_of(&old, memory))
                .map(with_leftovers)
        } else {
            placement_of(&tasks, resources.memory_gb_per_task)
        };
        let Some(placement) = placement else {
            continue;
        };
        if stopping || pinned {
            hold(&mut view, placement);
            held.insert(job.id);
        } else {
            view.placement = Some(placement);
        }
        views.push(view);
    }
    // Tasks of jobs no longer active (cancelled, failed, succeeded) that have not exited yet.
    for (job_id, tasks) in by_job {
        let Some(placement) = placement_of(&tasks, 0) else {
            continue;
        };
        let shape = placement.shape();
        let mut view = JobView {
            id: job_id,
            tenant: 0,
            priority: i32::MAX,
            submit_s: 0.0,
            workers: Range {
                min: shape.workers,
                max: shape.workers,
            },
            ps: Range {
                min: shape.ps,
                max: shape.ps,
            },
            preferred: shape,
            gpus_per_worker: tasks.iter().map(|t| t.gpus.len() as u32).max().unwrap_or(0),
            gpu_memory_gb: None,
            cpus_per_worker: tasks.iter().map(|t| t.cpus).max().unwrap_or(0),
            cpus_per_ps: tasks.iter().map(|t| t.cpus).max().unwrap_or(0),
            memory_gb_per_task: 0,
            preemptible: false,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: None,
            observed: Observations::default(),
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        };
        hold(&mut view, placement);
        held.insert(job_id);
        views.push(view);
    }
    count_claimed_gpus_once(&mut views, &held);
    views.sort_by_key(|a| a.id);
    Built {
        snapshot: ClusterSnapshot {
            now_s: seconds(now),
            nodes: sched_nodes,
            tenants: sched_tenants,
            jobs: views,
        },
        node_names: included.iter().map(|n| n.name.clone()).collect(),
        gpu_indices,
        held,
        jobs: jobs_by_id,
    }
}

/// A rescaling job's new placement plus its old workers still exiting on GPUs the new one does not
/// use (renumbered after the new workers, holding no CPUs: only the GPUs matter for the seconds they
/// take to exit). Old PS shards hold no GPU and are left out.
fn with_leftovers((mut placement, old): (Placement, Placement)) -> Placement {
    let taken: HashSet<(NodeId, u16)> = placement
        .tasks
        .iter()
        .flat_map(|t| t.gpus.iter().map(move |&g| (t.node, g)))
        .collect();
    let mut next = placement
        .tasks
        .iter()
        .filter(|t| t.role == Role::Worker)
        .map(|t| t.index + 1)
        .max()
        .unwrap_or(0);
    for task in old.tasks {
        if task.role == Role::Worker
            && !task.gpus.is_empty()
            && task.gpus.iter().all(|&g| !taken.contains(&(task.node, g)))
        {
            placement.tasks.push(TaskPlacement {
                index: next,
                cpus: 0,
                memory_gb: 0,
                ..task
            });
            next += 1;
        }
    }
    placement
}

/// A GPU that a stopping (held) job's task still holds while another job's current task already has
/// it is counted once, for the other job: the plan that stopped the first gave it to the second,
/// which must not lose it to the task it waits for to exit. Counted twice, the GPU looked
/// over-committed and the job that had just started was preempted at once, round after round. A
/// held job left with no task keeps nothing in the snapshot (it stays held: nothing is done to it).
fn count_claimed_gpus_once(views: &mut Vec<JobView>, held: &HashSet<JobId>) {
    let claimed: HashSet<(NodeId, u16)> = views
        .iter()
        .filter(|view| !held.contains(&view.id))
        .filter_map(|view| view.placement.as_ref())
        .flat_map(|placement| {
            placement
                .tasks
                .iter()
                .flat_map(|t| t.gpus.iter().map(move |&g| (t.node, g)))
        })
        .collect();
    if claimed.is_empty() {
        return;
    }
    views.retain_mut(|view| {
        if !held.contains(&view.id) {
            return true;
        }
        let Some(placement) = view.placement.take() else {
            return true;
        };
        let before = placement.tasks.len();
        let kept: Vec<TaskPlacement> = placement
            .tasks
            .into_iter()
            .filter(|t| t.gpus.iter().all(|&g| !claimed.contains(&(t.node, g))))
            .collect();
        if kept.is_empty() {
            return false;
        }
        if kept.len() == before {
            view.placement = Some(Placement { tasks: kept });
        } else {
            hold(view, Placement { tasks: kept });
        }
        true
    });
}

/// Shows a job as running where its tasks are, at a fixed shape that nothing may preempt or resize.
fn hold(view: &mut JobView, placement: Placement) {
    let shape = placement.shape();
    view.workers = Range {
        min: shape.workers,
        max: shape.workers,
    };
    view.ps = Range {
        min: shape.ps,
        max: shape.ps,
    };
    view.preferred = shape;
    view.preemptible = false;
    view.placement = Some(placement);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(role: Role, index: u32, node: u32, gpus: &[u16]) -> TaskPlacement {
        TaskPlacement {
            role,
            index,
            node: NodeId(node),
            gpus: gpus.to_vec(),
            cpus: 2,
            memory_gb: 0,
            packed: false,
        }
    }

    #[test]
    fn a_rescaling_job_holds_its_new_tasks_and_the_old_workers_gpus_still_in_use() {
        let new = Placement {
            tasks: vec![
                task(Role::Worker, 0, 0, &[0]),
                task(Role::Worker, 1, 0, &[1]),
                task(Role::Ps, 0, 0, &[]),
            ],
        };
        let old = Placement {
            tasks: vec![
                task(Role::Worker, 0, 0, &[0]),
                task(Role::Worker, 1, 1, &[0]),
                task(Role::Worker, 2, 1, &[1]),
                task(Role::Ps, 0, 1, &[]),
                task(Role::Ps, 1, 0, &[]),
            ],
        };
        let held = with_leftovers((new.clone(), old));
        assert_eq!(held.tasks[..3], new.tasks[..]);
        // Old worker 0 shares its GPU with the new worker 0: not counted twice. The old workers on
        // node 1 keep their GPUs (renumbered after the new workers, no CPUs); old PS shards drop out.
        assert_eq!(
            held.tasks[3..],
            [
                TaskPlacement {
                    cpus: 0,
                    ..task(Role::Worker, 2, 1, &[0])
                },
                TaskPlacement {
                    cpus: 0,
                    ..task(Role::Worker, 3, 1, &[1])
                },
            ]
        );
    }

    #[test]
    fn a_stopping_jobs_gpu_given_to_another_job_counts_once() {
        use drover_scheduler::snapshot::{Observations, Range, Shape};
        let view = |n: u128, gpus: &[u16]| JobView {
            id: JobId(uuid::Uuid::from_u128(n)),
            tenant: 0,
            priority: 0,
            submit_s: 0.0,
            workers: Range { min: 1, max: 1 },
            ps: Range { min: 0, max: 0 },
            preferred: Shape { ps: 0, workers: 1 },
            gpus_per_worker: 1,
            gpu_memory_gb: None,
            cpus_per_worker: 1,
            cpus_per_ps: 1,
            memory_gb_per_task: 0,
            preemptible: true,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: Some(Placement {
                tasks: gpus
                    .iter()
                    .enumerate()
                    .map(|(i, &g)| task(Role::Worker, i as u32, 0, &[g]))
                    .collect(),
            }),
            observed: Observations::default(),
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        };
        // Job 1 is stopping on GPUs 0 and 1; the plan that stopped it started job 2 on GPU 1.
        let mut views = vec![view(1, &[0, 1]), view(2, &[1]), view(3, &[2])];
        let held: HashSet<JobId> = [JobId(uuid::Uuid::from_u128(1))].into();
        count_claimed_gpus_once(&mut views, &held);
        let gpus = |v: &JobView| -> Vec<u16> {
            v.placement
                .as_ref()
                .map(|p| p.tasks.iter().flat_map(|t| t.gpus.clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            gpus(&views[0]),
            vec![0],
            "the stopping job keeps only GPU 0"
        );
        assert_eq!(views[0].workers, Range { min: 1, max: 1 });
        assert!(!views[0].preemptible);
        assert_eq!(gpus(&views[1]), vec![1], "the new job keeps GPU 1");
        // A stopping job whose every GPU is taken leaves the snapshot.
        let mut views = vec![view(1, &[1]), view(2, &[1])];
        count_claimed_gpus_once(&mut views, &held);
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].id, JobId(uuid::Uuid::from_u128(2)));
    }
}
