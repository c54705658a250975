//! `spec.distributed.launcher` on real executors: a `torch` job's workers each start one process per
//! GPU with the variables `torchrun` sets, one failing process stops its task's others, and a `jax`
//! job's workers get `jax.distributed`'s. (The PyTorch example, `examples/pytorch/`, trains with
//! them.)

use super::harness::Cluster;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn launched(name: &str, launcher: &str, workers: u32, gpus: u32, script: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c", script]},
            "resources": {"workers": workers, "ps": 0, "gpus_per_worker": gpus,
                          "cpus_per_worker": 1, "memory_gb_per_task": 1},
            "distributed": {"launcher": launcher},
            "max_restarts": 0
        }
    })
}

/// The log lines of job `id` that start with `prefix`, the prefix removed.
async fn lines(cluster: &Cluster, id: &str, prefix: &str) -> Vec<String> {
    cluster
        .logs(id)
        .await
        .iter()
        .filter_map(|l| l["line"].as_str()?.strip_prefix(prefix).map(str::to_owned))
        .collect()
}

/// Two workers of two (demo) GPUs on two executors: four processes, ranks 0-3 of a world of 4, each
/// worker's two processes local ranks 0 and 1, every one pointed at the first worker's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torch_job_starts_a_process_per_gpu_each_knowing_its_place() {
    let cluster = Cluster::start_with_slots(2).await;
    let script = "echo \"place $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK \
                  $NODE_RANK $MASTER_ADDR:$MASTER_PORT $TORCHELASTIC_RUN_ID\"";
    let created = cluster
        .post("/api/v1/jobs", launched("ranks", "torch", 2, 2, script))
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(60))
        .await;
    let tasks = cluster.tasks(&id).await;
    let first = tasks
        .iter()
        .find(|t| t["role"] == "worker" && t["index"] == 0)
        .unwrap_or_else(|| panic!("worker 0 in {tasks:#?}"));
    let master = first["address"].as_str().unwrap().to_owned();
    let places = cluster
        .wait_until(
            "four processes' lines",
            Duration::from_secs(20),
            async |c| {
                let places = lines(c, &id, "place ").await;
                (places.len() == 4).then_some(places)
            },
        )
        .await;
    let mut ranks = BTreeSet::new();
    for place in &places {
        let fields: Vec<&str> = place.split(' ').collect();
        let [
            rank,
            local,
            world,
            local_world,
            group,
            node,
            rendezvous,
            run,
        ] = fields[..]
        else {
            panic!("{place}");
        };
        let rank: u32 = rank.parse().unwrap();
        let local: u32 = local.parse().unwrap();
        let group: u32 = group.parse().unwrap();
        assert_eq!((world, local_world), ("4", "2"), "{place}");
        assert_eq!(rank, group * 2 + local, "{place}");
        assert_eq!(node, group.to_string(), "{place}");
        assert_eq!(rendezvous, master, "{place}");
        assert_eq!(run, id, "{place}");
        ranks.insert(rank);
    }
    assert_eq!(ranks, BTreeSet::from([0, 1, 2, 3]), "{places:?}");
}

/// One of a worker's processes failing stops the others (they would wait for it forever) and fails
/// the task with its status; a jax job's workers are one process each with jax.distributed's
/// variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_process_stops_its_peers_and_jax_gets_its_variables() {
    let cluster = Cluster::start_with_slots(2).await;
    let started = Instant::now();
    let script = "if [ \"$LOCAL_RANK\" = 1 ]; then sleep 1; echo 'rank 1 fails'; exit 3; fi; \
                  exec sleep 600";
    let created = cluster
        .post("/api/v1/jobs", launched("one-fails", "torch", 1, 2, script))
        .await;
    let failing = created["job"]["id"].as_str().unwrap().to_owned();

    let script = "echo \"jax $JAX_PROCESS_ID $JAX_NUM_PROCESSES $JAX_COORDINATOR_ADDRESS\"";
    let created = cluster
        .post("/api/v1/jobs", launched("jax-vars", "jax", 2, 0, script))
        .await;
    let jax = created["job"]["id"].as_str().unwrap().to_owned();

    let failed = cluster
        .wait_for_state(&failing, "failed", Duration::from_secs(60))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "the sleeping process was stopped, not waited for: {:?}",
        started.elapsed()
    );
    let events = cluster.events(&failing).await;
    assert!(
        events
            .iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("rank 1 fails")),
        "{failed} {events:#?}"
    );
    let task = &cluster.tasks(&failing).await[0];
    assert_eq!(task["exit_code"], 3, "{task}");

    cluster
        .wait_for_state(&jax, "succeeded", Duration::from_secs(60))
        .await;
    let tasks = cluster.tasks(&jax).await;
    let coordinator = tasks
        .iter()
        .find(|t| t["index"] == 0)
        .and_then(|t| t["address"].as_str())
        .unwrap()
        .to_owned();
    let seen = cluster
        .wait_until("both workers' lines", Duration::from_secs(20), async |c| {
            let seen = lines(c, &jax, "jax ").await;
            (seen.len() == 2).then_some(seen)
        })
        .await;
    let mut seen: Vec<String> = seen;
    seen.sort();
    assert_eq!(
        seen,
        [format!("0 2 {coordinator}"), format!("1 2 {coordinator}")],
    );
}
