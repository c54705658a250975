//! The leader dies (issue #55, item 4): two server replicas on one Postgres database, one executor
//! of two GPUs, and a queue whose order only the policy's memory explains — two jobs that have had an
//! hour of GPU service each (demoted to the `drover` policy's second queue) wait behind two that
//! have had none, though they were submitted first. The leader is killed with SIGKILL (no chance
//! to save or hand over anything); the other replica takes the lead, and its first round keeps every
//! waiting job's queue level and the order the dead leader had. A leader that restored nothing would
//! put all four back in the first queue, in submission order.

use super::harness::*;
use super::replicas::{Replica, start_executor, start_replica};
use drover_store::{NewMetrics, Store, TaskKey, TaskRole};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A one-GPU command job of the default tenant (which has no guarantee: every job borrows, so a job
/// of higher priority may take a running one's GPU). It reports a loss every second, so the
/// leader reads its samples as they come.
fn reporting_job(name: &str, priority: i32) -> Value {
    let program = r#"i=0; while :; do i=$((i+1)); printf '{"drover": "metrics", "step": %d, "values": {"loss": 1.0}}\n' "$i"; sleep 1; done"#;
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c", program]},
            "scheduling": {"priority": priority},
            "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 1, "cpus_per_worker": 1}
        }
    })
}

struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    async fn get(&self, path: &str) -> Value {
        admin_get(&self.http, &self.url, path).await
    }

    /// The rounds this replica has run, from its `/metrics`.
    async fn rounds(&self) -> u64 {
        let page = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        page.lines()
            .find_map(|line| line.strip_prefix("drover_scheduling_round_seconds_count "))
            .and_then(|count| count.trim().parse().ok())
            .expect("the round count in /metrics")
    }

    async fn submit(&self, job: Value) -> String {
        let created = admin_post(&self.http, &self.url, "/api/v1/jobs", job).await;
        created["job"]["id"].as_str().unwrap().to_owned()
    }

    async fn state(&self, id: &str) -> String {
        self.get(&format!("/api/v1/jobs/{id}")).await["job"]["state"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn wait_for_states(&self, ids: &[&String], state: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut states = Vec::new();
            for id in ids {
                states.push(self.state(id).await);
            }
            if states.iter().all(|s| s == state) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {ids:?} to be {state}: {states:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Each job's `drover` queue level, as the leader last saved it.
async fn levels(store: &dyn Store) -> BTreeMap<String, u64> {
    let saved = store.policy_state("drover").await.unwrap();
    saved
        .jobs
        .iter()
        .filter_map(|(job, part)| {
            let part: Value = serde_json::from_str(part).unwrap();
            Some((job.to_string(), part["las"]["q"].as_u64()?))
        })
        .collect()
}

/// The waiting jobs of the last round, in the policy's order, and when that round ended.
async fn queue(store: &dyn Store) -> (Vec<String>, chrono::DateTime<chrono::Utc>) {
    let round = store
        .last_round()
        .await
        .unwrap()
        .expect("a round was recorded");
    let order = round.waiting.iter().map(|w| w.job.to_string()).collect();
    (order, round.finished_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_after_a_kill_keeps_the_queue_levels_and_order() {
    let database = drover_store::testing::create_postgres_database().await;
    let store: Arc<dyn Store> = drover_store::connect(&database.url, 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let (api_a, gw_a, api_b, gw_b) = (free_port(), free_port(), free_port(), free_port());
    let a = start_replica(&database.url, &dir.path().join("a"), &shared, api_a, gw_a);
    let b = start_replica(&database.url, &dir.path().join("b"), &shared, api_b, gw_b);
    let executor = start_executor(&[&a, &b], dir.path(), "exec", 2);

    // Which replica leads: the one whose process the leader record names. The other serves the
    // test's requests throughout.
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        let holder: Option<String> = sqlx::query_scalar("SELECT holder FROM cluster_leader")
            .fetch_optional(&pool)
            .await
            .unwrap();
        if let Some(holder) = holder {
            break holder;
        }
        assert!(Instant::now() < deadline, "no replica took the lead");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (mut leader, _follower, follower_api): (Replica, Replica, u16) =
        if holder.ends_with(&format!("/{}", a.proc.child.id())) {
            (a, b, api_b)
        } else {
            (b, a, api_a)
        };
    let api = Api {
        http: http_client(),
        url: format!("http://127.0.0.1:{follower_api}"),
    };

    // Two jobs run on the two GPUs, four more wait.
    let first = [
        api.submit(reporting_job("served-0", 0)).await,
        api.submit(reporting_job("served-1", 0)).await,
    ];
    api.wait_for_states(&first.iter().collect::<Vec<_>>(), "running")
        .await;
    // Each has had an hour of its GPU: samples an hour and a half and half an hour old, in its
    // running generation, as its executor would have sent them then. The jobs' own reports that
    // follow make the leader read them: past 30 GPU-minutes, both move to the second queue.
    for id in &first {
        let key = TaskKey {
            job_id: id.parse().unwrap(),
            generation: 1,
            role: TaskRole::Worker,
            index: 0,
        };
        for (step, ago_min) in [(1, 90), (2, 30)] {
            let sample = NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                worker_nodes: 1,
                gpu_model: String::new(),
                step,
                values: vec![("loss".to_owned(), 1.0)],
                recorded_at: chrono::Utc::now() - chrono::Duration::minutes(ago_min),
            };
            store.record_metrics(&sample).await.unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let levels = levels(store.as_ref()).await;
        if first.iter().all(|id| levels.get(id) == Some(&1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the served jobs were not demoted: {levels:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Two jobs of higher priority take their GPUs; two more of their own priority come after.
    let urgent = [
        api.submit(reporting_job("urgent-0", 10)).await,
        api.submit(reporting_job("urgent-1", 10)).await,
    ];
    api.wait_for_states(&urgent.iter().collect::<Vec<_>>(), "running")
        .await;
    let later = [
        api.submit(reporting_job("later-0", 0)).await,
        api.submit(reporting_job("later-1", 0)).await,
    ];
    let waiting: Vec<&String> = later.iter().chain(&first).collect();
    api.wait_for_states(&waiting, "queued").await;

    // The queue the leader has: the jobs without service first, though submitted last, then the
    // served ones in the order they were demoted (whichever the leader read first).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (expected, before) = loop {
        let (order, _) = queue(store.as_ref()).await;
        let served_last = order.len() == 4
            && order[..2] == later
            && first.iter().all(|id| order[2..].contains(id));
        if served_last {
            break (order, levels(store.as_ref()).await);
        }
        if Instant::now() >= deadline {
            let round = store.last_round().await.unwrap().unwrap();
            let saved = store.policy_state("drover").await.unwrap();
            panic!(
                "the leader's queue is {order:?}, not later {later:?} then served {first:?}; round {round:?}; saved {saved:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for id in &later {
        assert_eq!(before.get(id), Some(&0), "{id} in the first queue");
    }

    // The leader dies.
    let (_, last_at) = queue(store.as_ref()).await;
    leader.proc.child.kill().unwrap();
    leader.proc.child.wait().unwrap();
    let killed_at = chrono::Utc::now().max(last_at);

    // The first round the new leader records (rounds come every half a second at most; this
    // reads every 20 ms) has the same queue, and so has every one after it for five seconds (a
    // round that leaves the same jobs waiting in the same order is not recorded again; the new
    // leader's round count, from its metrics, shows that rounds ran).
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen_at = loop {
        let (order, at) = queue(store.as_ref()).await;
        if at > killed_at {
            assert_eq!(
                order, expected,
                "the new leader's first round: its queue (expected: later-0, later-1, then the served jobs as the old leader had them)"
            );
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "no round was recorded within 30 s of the leader's death"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rounds_then = api.rounds().await;
    let watch_until = Instant::now() + Duration::from_secs(5);
    let mut seen_at = seen_at;
    while Instant::now() < watch_until {
        let (order, at) = queue(store.as_ref()).await;
        if at > seen_at {
            assert_eq!(order, expected, "a later round of the new leader");
            seen_at = at;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rounds = api.rounds().await - rounds_then;
    assert!(rounds >= 2, "the new leader ran {rounds} rounds in 5 s");
    let after = levels(store.as_ref()).await;
    for id in waiting {
        assert_eq!(after.get(id), before.get(id), "{id}'s queue level");
    }
    drop(executor);
}
