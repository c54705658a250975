//! Live resize latency: a real `drover server` and two executors (see the e2e harness, `e2e/src/lib.rs`; Postgres as in
//! the tests). A `train` job runs at 2 PS shards × 3 workers and is resized over the API, alternately
//! to 1 PS × 2 workers and back; each resize is timed from the scheduler's decision (the job's
//! `rescaling` event) to the first step at the new shape (the `running` event the leader's first
//! report produces), through the old tasks' checkpoint and exit, the new processes' start, their
//! restore and rendezvous. Models: the example MLP on the digits and a ~100 MB MLP.
//!
//!     cargo bench -p drover-e2e --bench resize

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot run should panic"
)]

use chrono::{DateTime, Utc};
use drover_e2e::{Cluster, MLP, ps_job};
use serde_json::{Value, json};
use std::time::Duration;

/// Resizes per model.
const RESIZES: usize = 4;

fn time(event: &Value) -> DateTime<Utc> {
    event["created_at"].as_str().unwrap().parse().unwrap()
}

/// One resize of a running job to (`ps`, `workers`); returns seconds from the decision to the first
/// step at the new shape and the process start → first step part of it (the engine's `startup_s`).
async fn resize(cluster: &Cluster, id: &str, ps: u32, workers: u32) -> (f64, f64) {
    let before = cluster.job(id).await["generation"].as_u64().unwrap();
    cluster
        .post(
            &format!("/api/v1/jobs/{id}/resize"),
            json!({"workers": {"min": workers, "max": workers}, "ps": {"min": ps, "max": ps}}),
        )
        .await;
    let events = cluster
        .wait_until(
            "the first step at the new shape",
            Duration::from_secs(180),
            async |c| {
                let job = c.job(id).await;
                assert_ne!(job["state"], "failed", "{}", job["message"]);
                let events = c.events(id).await;
                let last = events.last()?;
                (job["generation"].as_u64() > Some(before)
                    && last["from"] == "rescaling"
                    && last["to"] == "running")
                    .then_some(events)
            },
        )
        .await;
    let n = events.len();
    let (decision, first_step) = (&events[n - 2], &events[n - 1]);
    assert_eq!(decision["to"], "rescaling", "{events:#?}");
    let seconds = (time(first_step) - time(decision)).num_milliseconds() as f64 / 1000.0;
    let generation = before + 1;
    let startup = cluster
        .get(&format!("/api/v1/jobs/{id}/metrics?name=startup_s"))
        .await["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["generation"] == generation)
        .and_then(|m| m["value"].as_f64())
        .unwrap_or(f64::NAN);
    (seconds, startup)
}

async fn measure(cluster: &Cluster, name: &str, hidden: &[u32], batch: u32, every: u64) {
    let created = cluster
        .post(
            "/api/v1/jobs",
            ps_job(name, hidden, batch, 1_000_000, 1_000_000, every, 0),
        )
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster.wait_for_checkpoint(&id, every).await;
    let size = cluster.checkpoints(&id).await.last().unwrap()["size_bytes"]
        .as_u64()
        .unwrap();
    println!(
        "{name}: MLP hidden {hidden:?}, checkpoint {:.1} MB (parameters and AdamW state)",
        size as f64 / 1e6
    );
    let mut latencies = Vec::new();
    for i in 0..RESIZES {
        let (ps, workers) = if i % 2 == 0 { (1, 2) } else { (2, 3) };
        // Train a little at each shape first, so every resize interrupts a running step loop.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (seconds, startup) = resize(cluster, &id, ps, workers).await;
        println!(
            "  -> {ps} PS, {workers} workers: first step {seconds:.2} s after the decision \
             (process start to first step {startup:.2} s)"
        );
        latencies.push(seconds);
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "  {name}: median {:.2} s, worst {:.2} s over {RESIZES} resizes",
        latencies[RESIZES / 2],
        latencies[RESIZES - 1]
    );
    cluster
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await;
    cluster
        .wait_for_state(&id, "cancelled", Duration::from_secs(60))
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let cluster = Cluster::start_with_slots(2).await;
    println!("resize latency, decision -> first step at the new shape (live server, 2 executors)");
    measure(&cluster, "example-mlp", MLP, 256, 50).await;
    // 64·4096 + 4096·4096 + 4096·2048 + 2048·10 weights and the biases: 25.4 M parameters, 102 MB.
    measure(&cluster, "mlp-100mb", &[4096, 4096, 2048], 32, 5).await;
}
