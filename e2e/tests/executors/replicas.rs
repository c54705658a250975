//! Two server replicas on one Postgres database: one leads (the scheduling loop and the executors'
//! sessions), both serve the API. A rolling restart — each replica in turn stopped with SIGTERM and
//! started again — fails no request of a client that retries on the other replica, moves the lead,
//! and leaves the running job alone: its task keeps running and no new generation starts. The
//! replica that does not lead shows the nodes' heartbeats as the leader hears them.

use super::harness::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub(super) struct Replica {
    pub(super) proc: Proc,
    pub(super) gateway: u16,
    /// The pin of the gateway's authority, which the replicas share (it is kept in the database).
    pub(super) pin: String,
}

/// A `drover server` on `database` leading or following, its API and gateway on the given ports.
pub(super) fn start_replica(
    database: &str,
    dir: &Path,
    shared: &Path,
    api: u16,
    gateway: u16,
) -> Replica {
    let proc = Proc::spawn(&[
        "server",
        "--listen",
        &format!("127.0.0.1:{api}"),
        "--gateway-listen",
        &format!("127.0.0.1:{gateway}"),
        "--database-url",
        database,
        "--data-dir",
        dir.to_str().unwrap(),
        "--checkpoint-dir",
        shared.join("checkpoints").to_str().unwrap(),
        "--secret-key-file",
        shared.join("secret-key").to_str().unwrap(),
        "--executor-timeout",
        "30s",
        "--tick",
        "500ms",
    ]);
    proc.wait_for_line("drover server listening on ");
    let (_, pin) = Cluster::gateway_line(&proc.wait_for_line("executor gateway listening on "));
    Replica {
        proc,
        gateway,
        pin: pin.expect("the gateway uses mutual TLS"),
    }
}

/// An executor of `slots` demo GPUs that knows every replica's gateway, its data under `dir`.
pub(super) fn start_executor(replicas: &[&Replica], dir: &Path, name: &str, slots: u32) -> Proc {
    let gateways: Vec<String> = replicas
        .iter()
        .map(|r| format!("https://127.0.0.1:{}", r.gateway))
        .collect();
    let gateways = gateways.join(",");
    let data_dir = dir.join(name);
    let (cpus, slots) = ((2 * slots).to_string(), slots.to_string());

    let mut args = vec![
        "executor",
        "--gateway",
        &gateways,
        "--name",
        name,
        "--slots",
        &slots,
        "--cpus",
        &cpus,
        "--memory-gb",
        "64",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--gateway-ca-hash",
        &replicas[0].pin,
    ];
    args.extend_from_slice(sandbox_flags());
    let executor = Proc::spawn(&args);
    executor.wait_for_line("drover executor ");
    executor
}

/// SIGTERM, then the process must exit by itself, successfully.
fn stop_gracefully(replica: &mut Replica) {
    let pid = replica.proc.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = replica.proc.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "the server exited with {status} after SIGTERM"
    );
}

/// A client that sends each request to one replica and, when that fails (no connection, a 5xx),
/// once to the other: what users of a load-balanced service do.
#[derive(Clone)]
struct RetryingClient {
    http: reqwest::Client,
    urls: [String; 2],
}

impl RetryingClient {
    /// The nodes as the replica at `url` alone shows them (no retry on the other).
    async fn nodes_on(&self, url: &str) -> Vec<Value> {
        let nodes: Value = self
            .http
            .get(format!("{url}/api/v1/nodes"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        nodes["nodes"].as_array().unwrap().clone()
    }

    async fn send(
        &self,
        turn: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let mut last = String::new();
        for attempt in 0..2 {
            let url = &self.urls[(turn + attempt) % 2];
            let mut request = self
                .http
                .request(method.clone(), format!("{url}{path}"))
                .bearer_auth(ADMIN_TOKEN)
                .timeout(Duration::from_secs(10));
            if let Some(body) = body {
                request = request.json(body);
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => {
                    return Ok(response.json().await.unwrap_or(Value::Null));
                }
                Ok(response) if response.status().is_server_error() => {
                    last = format!("{url}: {}", response.status());
                }
                Ok(response) => {
                    return Err(format!(
                        "{url}{path}: {} {}",
                        response.status(),
                        response.text().await.unwrap_or_default()
                    ));
                }
                Err(err) => last = format!("{url}: {err}"),
            }
        }
        Err(format!(
            "{} {path} failed on both replicas; last: {last}",
            method
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_two_replicas_fails_no_request_and_keeps_the_job() {
    let database = drover_store::testing::create_postgres_database().await;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let (api_a, gw_a, api_b, gw_b) = (free_port(), free_port(), free_port(), free_port());
    let mut a = start_replica(&database.url, &dir.path().join("a"), &shared, api_a, gw_a);
    let mut b = start_replica(&database.url, &dir.path().join("b"), &shared, api_b, gw_b);
    assert_eq!(a.pin, b.pin, "the replicas share one authority");
    let executors: Vec<Proc> = ["exec-a", "exec-b"]
        .into_iter()
        .map(|name| start_executor(&[&a, &b], dir.path(), name, 1))
        .collect();
    let client = RetryingClient {
        http: reqwest::Client::new(),
        urls: [
            format!("http://127.0.0.1:{api_a}"),
            format!("http://127.0.0.1:{api_b}"),
        ],
    };
    let wait = async |what: &str, check: &dyn Fn(&Value) -> bool, path: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(value) = client.send(0, reqwest::Method::GET, path, None).await
                && check(&value)
            {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    wait(
        "both executors healthy",
        &|nodes| {
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["health"] == "healthy")
                .count()
                == 2
        },
        "/api/v1/nodes",
    )
    .await;
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    // Absent for a moment while the lead changes hands.
    let leader = async || -> String {
        sqlx::query_scalar::<_, String>("SELECT holder FROM cluster_leader")
            .fetch_optional(&pool)
            .await
            .unwrap()
            .unwrap_or_default()
    };
    let first_leader = leader().await;

    let job = json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": "through-restarts"},
        "spec": {
            "type": "command",
            "command": {
                "argv": ["python3", "examples/command/digits_softmax.py", "--steps", "3000",
                         "--checkpoint-every", "300", "--eval-every", "100",
                         "--step-sleep", "0.008", "--final-accuracy-min", "0.9"],
                "env": {"PYTHONUNBUFFERED": "1"}
            },
            "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 1, "cpus_per_worker": 1}
        }
    });
    let created = client
        .send(0, reqwest::Method::POST, "/api/v1/jobs", Some(&job))
        .await
        .unwrap();
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    wait(
        "the job running",
        &|j| j["job"]["state"] == "running",
        &format!("/api/v1/jobs/{id}"),
    )
    .await;

    // A client reading and submitting throughout, alternating replicas, retrying on the other.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (client, stop, id) = (client.clone(), stop.clone(), id.clone());
        tokio::spawn(async move {
            let (mut sent, mut failures, mut submitted) = (0, Vec::new(), 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let read = client
                    .send(
                        sent,
                        reqwest::Method::GET,
                        &format!("/api/v1/jobs/{id}"),
                        None,
                    )
                    .await;
                // A write that competes for nothing the running job holds: a token.
                let token = json!({"name": format!("token-{sent}"), "expires_in": "1h"});
                let written = client
                    .send(
                        sent + 1,
                        reqwest::Method::POST,
                        "/api/v1/tokens",
                        Some(&token),
                    )
                    .await;
                submitted += usize::from(written.is_ok());
                failures.extend(read.err());
                failures.extend(written.err());
                sent += 2;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (sent, submitted, failures)
        })
    };

    // Roll: A, then B, each stopped with SIGTERM and started again on the same addresses.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_gracefully(&mut a);
    a = start_replica(&database.url, &dir.path().join("a"), &shared, api_a, gw_a);
    // Only the leader holds sessions: ask it (the replica whose process the leader record names)
    // until both executors have found it.
    let leading_url = async || {
        let holder = leader().await;
        if holder.ends_with(&format!("/{}", a.proc.child.id())) {
            format!("http://127.0.0.1:{api_a}")
        } else {
            format!("http://127.0.0.1:{api_b}")
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let url = leading_url().await;
        let healthy = client
            .nodes_on(&url)
            .await
            .iter()
            .filter(|n| n["health"] == "healthy")
            .count();
        if healthy == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the executors did not find the new leader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_gracefully(&mut b);
    b = start_replica(&database.url, &dir.path().join("b"), &shared, api_b, gw_b);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, submitted, failures) = traffic.await.unwrap();
    assert!(
        failures.is_empty(),
        "{} of {sent} requests failed: {failures:#?}",
        failures.len()
    );
    assert!(sent > 20, "only {sent} requests were sent");

    // Every acknowledged write is there, once.
    let listed = client
        .send(0, reqwest::Method::GET, "/api/v1/tokens", None)
        .await
        .unwrap();
    let made = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("token-"))
        .count();
    // A write retried on the other replica after its first attempt committed (the answer lost with
    // the stopping replica) may be there twice; none is missing.
    assert!(
        made >= submitted,
        "{made} tokens for {submitted} acknowledged writes"
    );

    // The lead moved (both replicas were restarted, so neither first process leads).
    let now_leading = leader().await;
    assert_ne!(now_leading, first_leader);
    assert!(
        [a.proc.child.id(), b.proc.child.id()]
            .iter()
            .any(|pid| now_leading.ends_with(&format!("/{pid}"))),
        "the leader `{now_leading}` is not one of the running replicas"
    );

    // The job ran through both restarts in its first generation: never stopped, never restarted.
    let done = wait(
        "the job to succeed",
        &|j| j["job"]["state"] == "succeeded" || j["job"]["state"] == "failed",
        &format!("/api/v1/jobs/{id}"),
    )
    .await;
    assert_eq!(
        done["job"]["state"], "succeeded",
        "{}",
        done["job"]["message"]
    );
    let events = client
        .send(
            0,
            reqwest::Method::GET,
            &format!("/api/v1/jobs/{id}/events"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(done["job"]["generation"], 1, "{:#?}", events["events"]);
    let reasons: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["submitted", "allocated", "rendezvous_complete", "completed"]
    );

    // The replica that does not lead holds no session, yet shows each node's heartbeats as they
    // come (the leader writes them every 15 s), not the time the node last registered.
    let since = chrono::Utc::now();
    let follower = if leader().await.ends_with(&format!("/{}", a.proc.child.id())) {
        format!("http://127.0.0.1:{api_b}")
    } else {
        format!("http://127.0.0.1:{api_a}")
    };
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let heard: Vec<Option<chrono::DateTime<chrono::Utc>>> = client
            .nodes_on(&follower)
            .await
            .iter()
            .map(|n| n["last_heartbeat_at"].as_str().and_then(|t| t.parse().ok()))
            .collect();
        if heard.len() == 2 && heard.iter().all(|at| at.is_some_and(|at| at > since)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower {follower} shows no heartbeat after {since}: {heard:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(executors);
}
