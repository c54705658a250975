//! Jobs that no node of the cluster could ever hold, whatever else runs: a worker that asks for more
//! GPUs, CPUs or host memory than any one node has (a worker's GPUs share a node), a PS shard that
//! asks for more CPUs or memory than any node has, or a smallest shape of more GPUs than the whole
//! cluster. Every policy is
//! shown the snapshot without them (they wait with `NeverFits`), so such a job never counts in a
//! tenant's share or maximum, nor holds back the jobs behind it. Before, a job of 4-GPU workers on
//! nodes of 2 held its tenant's quota while GPUs sat idle.

use crate::cluster::Node;
use crate::snapshot::{ClusterSnapshot, JobView};

/// Why a job in an image never fits where no node runs images.
pub const IMAGE_REASON: &str = "it runs in an image (spec.command.image), and no node runs images \
     (executors with sandboxes and skopeo and umoci, or with --task-pods)";

/// Why no node may run `job` at all: its constraints applied in turn (image, node selector, GPU
/// types, tolerations), the first that leaves no node named with what the cluster has.
fn why_no_node(nodes: &[Node], job: &JobView) -> String {
    let mut left: Vec<&Node> = nodes.iter().collect();
    if job.image {
        left.retain(|n| n.runs_images);
        if left.is_empty() {
            return IMAGE_REASON.to_owned();
        }
    }
    if !job.node_selector.is_empty() {
        left.retain(|n| {
            job.node_selector
                .iter()
                .all(|(key, value)| n.labels.get(key) == Some(value))
        });
        if left.is_empty() {
            let wanted: Vec<String> = job
                .node_selector
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            return format!(
                "no node has the labels spec.resources.node_selector asks for ({})",
                wanted.join(", ")
            );
        }
    }
    if !job.gpu_types.is_empty() {
        let mut models: Vec<&str> = left
            .iter()
            .flat_map(|n| n.gpus.iter().map(|g| g.model.as_str()))
            .collect();
        models.sort_unstable();
        models.dedup();
        left.retain(|n| job.gpu_types.iter().any(|t| n.all_gpus_are(t)));
        if left.is_empty() {
            return format!(
                "no node has GPUs of a model in spec.resources.gpu_types ({}); the cluster's models are {}",
                job.gpu_types.join(", "),
                models.join(", ")
            );
        }
    }
    let mut taints: Vec<String> = left
        .iter()
        .flat_map(|n| n.taints.iter().map(|t| format!("{}={}", t.key, t.value)))
        .collect();
    taints.sort_unstable();
    taints.dedup();
    format!(
        "every node it could otherwise use is tainted, and spec.resources.tolerations tolerates none of {}",
        taints.join(", ")
    )
}

/// Whether no node of `snapshot` (schedulable or not: a cordon is lifted, a node comes back) could
/// hold one task of `job` at its smallest shape, or the cluster all of it. An empty cluster holds
/// nothing yet, and says nothing.
pub fn never_fits(snapshot: &ClusterSnapshot, job: &JobView) -> bool {
    why_never_fits(&snapshot.nodes, job).is_some()
}

/// Whether some node of `nodes` is tainted (then every job's nodes are narrowed).
fn any_tainted(nodes: &[Node]) -> bool {
    nodes.iter().any(|n| !n.taints.is_empty())
}

/// Why no node of `nodes` could ever hold `job`, in words ("a worker needs 4 GPUs, and no node has
/// more than 2"); `None` when one could (or there are no nodes yet).
pub fn why_never_fits(nodes: &[Node], job: &JobView) -> Option<String> {
    why_never_fits_among(nodes, job, any_tainted(nodes))
}

/// [`why_never_fits`], told whether some node is tainted (asked once for a whole snapshot).
fn why_never_fits_among(nodes: &[Node], job: &JobView, tainted: bool) -> Option<String> {
    if nodes.is_empty() {
        return None;
    }
    // Only the nodes that may run it at all (an image, a node selector, GPU types, taints): a pass
    // that allocates nothing, and none at all for a job that may run anywhere (once a round for
    // every waiting job, on every node: it must stay cheap).
    if job.is_constrained() || tainted {
        let admitting = nodes.iter().filter(|n| job.may_run_on(n));
        if admitting.clone().next().is_none() {
            return Some(why_no_node(nodes, job));
        }
        why_among(admitting, job)
    } else {
        why_among(nodes.iter(), job)
    }
}

/// [`why_never_fits`] among `nodes` (those that may run `job`, at least one).
fn why_among<'a>(nodes: impl Iterator<Item = &'a Node> + Clone, job: &JobView) -> Option<String> {
    let most = |of: fn(&Node) -> u64| nodes.clone().map(of).max().unwrap_or(0);
    let gpus_for = |node: &Node| -> u32 {
        match job.gpu_memory_gb {
            Some(memory) if job.gpus_per_worker > 0 => {
                node.gpus.iter().filter(|g| g.memory_gb >= memory).count() as u32
            }
            _ => node.num_gpus(),
        }
    };
    if job.workers.min > 0 {
        let worker_fits = nodes.clone().any(|node| {
            gpus_for(node) >= job.gpus_per_worker
                && node.cpus >= job.cpus_per_worker
                && node.memory_gb >= job.memory_gb_per_task
        });
        if !worker_fits {
            let reason = if !nodes.clone().any(|n| gpus_for(n) >= job.gpus_per_worker) {
                match job.gpu_memory_gb {
                    Some(memory) => format!(
                        "a worker needs {} GPUs of {memory} GB or more on one node, and no node has that many",
                        job.gpus_per_worker
                    ),
                    None => format!(
                        "a worker needs {} GPUs on one node, and no node has more than {}",
                        job.gpus_per_worker,
                        most(|n| u64::from(n.num_gpus()))
                    ),
                }
            } else if !nodes.clone().any(|n| n.cpus >= job.cpus_per_worker) {
                format!(
                    "a worker needs {} CPUs on one node, and no node has more than {}",
                    job.cpus_per_worker,
                    most(|n| u64::from(n.cpus))
                )
            } else if !nodes.clone().any(|n| n.memory_gb >= job.memory_gb_per_task) {
                format!(
                    "a task needs {} GB of host memory, and no node has more than {} GB",
                    job.memory_gb_per_task,
                    most(|n| u64::from(n.memory_gb))
                )
            } else {
                format!(
                    "a worker needs {} GPUs, {} CPUs and {} GB of memory on one node, and no node has all of them",
                    job.gpus_per_worker, job.cpus_per_worker, job.memory_gb_per_task
                )
            };
            return Some(reason);
        }
    }
    let unit = job.worker_unit.max(1);
    if unit > 1 && job.workers.min > 0 {
        let (gpus, cpus, memory) = (
            unit * job.gpus_per_worker,
            unit * job.cpus_per_worker,
            unit * job.memory_gb_per_task,
        );
        if !nodes
            .clone()
            .any(|n| gpus_for(n) >= gpus && n.cpus >= cpus && n.memory_gb >= memory)
        {
            return Some(format!(
                "a tensor-parallel group of {unit} workers needs {gpus} GPUs, {cpus} CPUs and {memory} GB of memory on one node, and no node has all of them"
            ));
        }
    }
    if job.ps.min > 0
        && !nodes
            .clone()
            .any(|node| node.cpus >= job.cpus_per_ps && node.memory_gb >= job.memory_gb_per_task)
    {
        return Some(format!(
            "a parameter-server shard needs {} CPUs and {} GB of memory on one node, and no node has both",
            job.cpus_per_ps, job.memory_gb_per_task
        ));
    }
    let cluster_gpus: u64 = nodes.clone().map(|n| u64::from(n.num_gpus())).sum();
    let smallest = u64::from(job.workers.min) * u64::from(job.gpus_per_worker);
    (smallest > cluster_gpus).then(|| {
        format!("its smallest shape needs {smallest} GPUs, and the cluster has {cluster_gpus}")
    })
}

/// The indices of the jobs in `snapshot` that [`never_fits`].
pub fn unplaceable(snapshot: &ClusterSnapshot) -> Vec<usize> {
    let tainted = any_tainted(&snapshot.nodes);
    // Jobs that may run on any node and ask for the same (most of a round's jobs share a few
    // shapes) get the same answer: each answer costs passes over every node, once a round for every
    // job, so it is worked out once per distinct ask.
    let mut answers: std::collections::HashMap<Ask, bool> = std::collections::HashMap::new();
    snapshot
        .jobs
        .iter()
        .enumerate()
        .filter(|(_, job)| {
            if job.is_constrained() || tainted {
                return why_never_fits_among(&snapshot.nodes, job, tainted).is_some();
            }
            *answers
                .entry(Ask::of(job))
                .or_insert_with(|| why_never_fits_among(&snapshot.nodes, job, tainted).is_some())
        })
        .map(|(i, _)| i)
        .collect()
}

/// Everything of a job [`why_never_fits_among`] reads, for a job that may run on any node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Ask {
    min_workers: u32,
    min_ps: u32,
    gpus_per_worker: u32,
    /// The bits of its GPU memory need, where it has one.
    gpu_memory_gb: Option<u64>,
    cpus_per_worker: u32,
    cpus_per_ps: u32,
    memory_gb_per_task: u32,
    worker_unit: u32,
}

impl Ask {
    fn of(job: &JobView) -> Ask {
        Ask {
            min_workers: job.workers.min,
            min_ps: job.ps.min,
            gpus_per_worker: job.gpus_per_worker,
            gpu_memory_gb: job.gpu_memory_gb.map(f64::to_bits),
            cpus_per_worker: job.cpus_per_worker,
            cpus_per_ps: job.cpus_per_ps,
            memory_gb_per_task: job.memory_gb_per_task,
            worker_unit: job.worker_unit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::uniform_cluster;
    use crate::snapshot::{Range, Shape};

    fn job(id: u128, tenant: u32, workers: u32, gpus_per_worker: u32) -> JobView {
        JobView {
            id: drover_core::JobId(uuid::Uuid::from_u128(id)),
            tenant,
            priority: 0,
            submit_s: id as f64,
            workers: Range {
                min: workers,
                max: workers,
            },
            ps: Range { min: 0, max: 0 },
            preferred: Shape { ps: 0, workers },
            gpus_per_worker,
            gpu_memory_gb: None,
            cpus_per_worker: 1,
            cpus_per_ps: 1,
            memory_gb_per_task: 0,
            preemptible: true,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: None,
            observed: Default::default(),
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        }
    }

    #[test]
    fn a_worker_too_big_for_any_node_never_fits_but_an_empty_cluster_says_nothing() {
        let mut snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes: uniform_cluster(3, 4, 8, 8),
            tenants: Vec::new(),
            jobs: Vec::new(),
        };
        let mut wide = job(1, 0, 2, 4);
        assert!(!never_fits(&snapshot, &wide));
        wide.cpus_per_worker = 9;
        assert!(never_fits(&snapshot, &wide));
        let mut big = job(2, 0, 4, 4);
        assert!(never_fits(&snapshot, &big), "16 GPUs on a cluster of 12");
        big.workers.min = 3;
        assert!(!never_fits(&snapshot, &big));
        let mut memory = job(3, 0, 1, 2);
        memory.gpu_memory_gb = Some(40.0);
        assert!(never_fits(&snapshot, &memory), "GPUs of 32 GB");
        let mut host = job(4, 0, 1, 1);
        host.memory_gb_per_task = 33;
        assert!(never_fits(&snapshot, &host), "nodes of 4 GPUs x 8 GB");
        host.memory_gb_per_task = 32;
        assert!(!never_fits(&snapshot, &host));
        let why = why_never_fits(&snapshot.nodes, &wide).unwrap();
        assert_eq!(
            why,
            "a worker needs 9 CPUs on one node, and no node has more than 8"
        );
        let mut greedy = job(5, 0, 1, 8);
        greedy.cpus_per_worker = 1;
        assert_eq!(
            why_never_fits(&snapshot.nodes, &greedy).unwrap(),
            "a worker needs 8 GPUs on one node, and no node has more than 4"
        );
        snapshot.nodes.clear();
        assert!(!never_fits(&snapshot, &memory));
    }

    #[test]
    fn a_job_goes_only_where_its_selector_and_gpu_types_allow_and_prefers_its_first_type() {
        use crate::place::{FreeResources, Strategy};
        let mut nodes = uniform_cluster(3, 2, 8, 8);
        for (node, model, pool) in [
            (0, "Tesla K80", "a"),
            (1, "NVIDIA V100-SXM2-32GB", "a"),
            (2, "NVIDIA V100-SXM2-32GB", "b"),
        ] {
            for gpu in &mut nodes[node].gpus {
                gpu.model = model.to_owned();
            }
            nodes[node]
                .labels
                .insert("pool".to_owned(), pool.to_owned());
        }
        let mut v100_in_a = job(1, 0, 1, 1);
        v100_in_a.gpu_types = vec!["v100".to_owned()];
        v100_in_a
            .node_selector
            .insert("pool".to_owned(), "a".to_owned());
        let mut k80_first = job(2, 0, 1, 2);
        k80_first.gpu_types = vec!["k80".to_owned(), "v100".to_owned()];
        let mut p100 = job(3, 0, 1, 1);
        p100.gpu_types = vec!["p100".to_owned()];
        let mut nowhere = job(4, 0, 1, 1);
        nowhere
            .node_selector
            .insert("pool".to_owned(), "c".to_owned());
        let snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes,
            tenants: Vec::new(),
            jobs: vec![v100_in_a.clone(), k80_first.clone()],
        };
        assert_eq!(
            why_never_fits(&snapshot.nodes, &p100).unwrap(),
            "no node has GPUs of a model in spec.resources.gpu_types (p100); the cluster's models are NVIDIA V100-SXM2-32GB, Tesla K80"
        );
        assert_eq!(
            why_never_fits(&snapshot.nodes, &nowhere).unwrap(),
            "no node has the labels spec.resources.node_selector asks for (pool=c)"
        );
        let one = Shape { ps: 0, workers: 1 };
        let mut free = FreeResources::empty_cluster(&snapshot);
        let placed = free.place(&v100_in_a, one, Strategy::Relaxed).unwrap();
        assert_eq!(placed.tasks[0].node.0, 1, "the V100 node of pool a");
        // Its first type while it has room (the K80 node), then its second, never a mix.
        let placed = free.place(&k80_first, one, Strategy::Relaxed).unwrap();
        assert_eq!(placed.tasks[0].node.0, 0);
        let placed = free.place(&k80_first, one, Strategy::Relaxed).unwrap();
        assert_eq!(placed.tasks[0].node.0, 2, "the K80s are taken: a V100 node");
        // Node 1 has one V100 left: a job without constraints may take it, and then a second
        // pool-a V100 job must wait.
        let mut left = free.clone();
        assert_eq!(
            left.place(&job(5, 0, 1, 1), one, Strategy::Relaxed)
                .unwrap()
                .tasks[0]
                .node
                .0,
            1
        );
        assert!(left.place(&v100_in_a, one, Strategy::Relaxed).is_err());
        let placed = free.place(&v100_in_a, one, Strategy::Relaxed).unwrap();
        assert_eq!(placed.tasks[0].node.0, 1);
    }

    #[test]
    fn a_tainted_node_takes_only_the_jobs_that_tolerate_it() {
        use crate::cluster::{Taint, Toleration};
        use crate::place::{FreeResources, Strategy};
        let mut nodes = uniform_cluster(2, 1, 8, 8);
        nodes[1].taints.push(Taint {
            key: "dedicated".to_owned(),
            value: "vision".to_owned(),
        });
        let plain = job(1, 0, 1, 1);
        let mut tolerant = job(2, 0, 1, 1);
        tolerant.tolerations.push(Toleration {
            key: Some("dedicated".to_owned()),
            value: Some("vision".to_owned()),
        });
        let mut wrong = job(3, 0, 1, 1);
        wrong.tolerations.push(Toleration {
            key: Some("dedicated".to_owned()),
            value: Some("speech".to_owned()),
        });
        let mut everything = job(4, 0, 1, 1);
        everything.tolerations.push(Toleration {
            key: None,
            value: None,
        });
        assert!(!plain.may_run_on(&nodes[1]) && plain.may_run_on(&nodes[0]));
        assert!(tolerant.may_run_on(&nodes[1]));
        assert!(!wrong.may_run_on(&nodes[1]));
        assert!(everything.may_run_on(&nodes[1]));
        let snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes,
            tenants: Vec::new(),
            jobs: vec![plain.clone()],
        };
        let one = Shape { ps: 0, workers: 1 };
        let mut free = FreeResources::empty_cluster(&snapshot);
        assert_eq!(
            free.place(&plain, one, Strategy::Relaxed).unwrap().tasks[0]
                .node
                .0,
            0
        );
        // The untainted node is full: a plain job waits, though the tainted one is free.
        assert_eq!(
            free.place(&plain, one, Strategy::Relaxed),
            Err(crate::plan::WaitReason::EligibleNodesBusy)
        );
        assert_eq!(
            free.place(&tolerant, one, Strategy::Relaxed).unwrap().tasks[0]
                .node
                .0,
            1
        );
        let mut only_tainted = snapshot.clone();
        only_tainted.nodes.remove(0);
        assert_eq!(
            why_never_fits(&only_tainted.nodes, &plain).unwrap(),
            "every node it could otherwise use is tainted, and spec.resources.tolerations tolerates none of dedicated=vision"
        );
    }

    #[test]
    fn a_job_in_an_image_goes_only_to_nodes_that_run_images() {
        use crate::place::{FreeResources, Strategy};
        let mut snapshot = ClusterSnapshot {
            now_s: 0.0,
            nodes: uniform_cluster(3, 4, 8, 8),
            tenants: Vec::new(),
            jobs: Vec::new(),
        };
        let mut imaged = job(1, 0, 2, 1);
        imaged.image = true;
        assert_eq!(
            why_never_fits(&snapshot.nodes, &imaged).as_deref(),
            Some(IMAGE_REASON)
        );
        snapshot.nodes[2].runs_images = true;
        assert!(!never_fits(&snapshot, &imaged));
        let shape = Shape { ps: 0, workers: 2 };
        snapshot.jobs.push(imaged.clone());
        let mut free = FreeResources::empty_cluster(&snapshot);
        let placement = free.place(&imaged, shape, Strategy::Relaxed).unwrap();
        assert!(
            placement.tasks.iter().all(|t| t.node.0 == 2),
            "{placement:?}"
        );
        // Node 2 full: the image job waits for it, though nodes 0 and 1 are free.
        let mut other = job(2, 0, 2, 1);
        other.image = true;
        assert_eq!(
            free.place(&other, Shape { ps: 0, workers: 3 }, Strategy::Relaxed),
            Err(crate::plan::WaitReason::EligibleNodesBusy)
        );
        // A job without an image goes anywhere.
        let plain = job(3, 0, 4, 1);
        assert!(
            free.place(&plain, Shape { ps: 0, workers: 4 }, Strategy::Relaxed)
                .is_ok()
        );
        // Too big for the one image node, though the other nodes could hold it.
        snapshot.nodes[2].gpus.truncate(1);
        assert_eq!(
            why_never_fits(&snapshot.nodes, &imaged).unwrap(),
            "its smallest shape needs 2 GPUs, and the cluster has 1",
            "only the nodes that run images count"
        );
        let mut wide = job(4, 0, 1, 2);
        wide.image = true;
        assert_eq!(
            why_never_fits(&snapshot.nodes, &wide).unwrap(),
            "a worker needs 2 GPUs on one node, and no node has more than 1"
        );
    }
}
