//! Server-side render time and size of the dashboard's heaviest pages, on a store holding 10,000 jobs
//! and one job with 100,000 metric points (50,000 steps of `loss` and `accuracy`) and 100,000 log
//! lines, through the whole HTTP application in-process (routing, session lookup, store queries,
//! templates).
//!
//! ```sh
//! cargo bench -p drover-web --bench pages                 # SQLite
//! DROVER_BENCH_POSTGRES=1 cargo bench -p drover-web --bench pages   # Postgres (DROVER_TEST_DATABASE_URL)
//! ```
//! Targets (issue 15): p99 ≤ 50 ms per page, first load of any page ≤ 300 KB.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use axum::body::Body;
use axum::http::Request;
use chrono::Utc;
use drover_api::auth;
use drover_api::state::AppState;
use drover_core::{JobId, JobState, ReasonCode, Role};
use drover_runtime::{Runtime, RuntimeConfig};
use drover_store::testing::TestDb;
use drover_store::tokens;
use drover_store::{
    NewJob, NewLogLine, NewMetrics, NewTask, NewTenant, NewToken, NewUser, Quota, StateChange,
    TaskKey, TaskRole,
};
use http_body_util::BodyExt;
use std::time::Instant;
use tower::ServiceExt;

const JOBS: usize = 10_000;
const STEPS: u64 = 50_000;
const RUNS: usize = 100;
const LOG_LINES: usize = 100_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let postgres = std::env::var("DROVER_BENCH_POSTGRES").is_ok_and(|v| v == "1");
    let db = if postgres {
        TestDb::postgres().await
    } else {
        TestDb::sqlite().await
    };
    let store = db.store.clone();
    let seeding = Instant::now();
    let tenant = store
        .create_tenant(&NewTenant {
            name: "bench".into(),
            quota: Quota::default(),
        })
        .await
        .unwrap();
    let user = store
        .create_user(&NewUser {
            tenant_id: tenant.id,
            name: "bench".into(),
            role: Role::Admin,
            cluster_admin: true,
        })
        .await
        .unwrap();
    let session = tokens::generate_token();
    store
        .create_token(&NewToken {
            user_id: user.id,
            name: "dashboard session".into(),
            token_hash: tokens::hash_token(&session),
            prefix: tokens::display_prefix(&session),
            expires_at: None,
            parent: None,
        })
        .await
        .unwrap();
    let document: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/digits-mlp.yaml")).unwrap();
    let mut big = None;
    for i in 0..JOBS {
        let mut document = document.clone();
        document["metadata"]["name"] = format!("job-{i:05}").into();
        let job = store
            .create_job(&NewJob {
                id: JobId::new(),
                tenant_id: tenant.id,
                tenant_name: tenant.name.clone(),
                name: format!("job-{i:05}"),
                job_type: drover_core::spec::JobType::Train,
                priority: 0,
                max_gpus: 1,
                labels: [("team".to_owned(), format!("t{}", i % 7))].into(),
                document,
                submitted_by: user.id,
                request_hash: None,
                idempotency_key: None,
                created_at: Utc::now(),
            })
            .await
            .unwrap()
            .value;
        big = Some(job.id);
    }
    // The newest job trains: a generation, and 100,000 metric points.
    let big = big.unwrap();
    let change = StateChange {
        to: JobState::Starting,
        reason: ReasonCode::Allocated,
        message: "bench".into(),
        actor: None,
    };
    let task = NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: "node-0".into(),
        gpus: vec![0],
        cpus: 1,
    };
    let generation = store
        .start_generation(big, &[task], &change)
        .await
        .unwrap()
        .unwrap();
    let key = TaskKey {
        job_id: big,
        generation,
        role: TaskRole::Worker,
        index: 0,
    };
    for step in 0..STEPS {
        let x = step as f64 + 1.0;
        store
            .record_metrics(&NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                worker_nodes: 1,
                gpu_model: "bench".into(),
                step,
                values: vec![
                    (
                        "loss".into(),
                        2.0 / x.sqrt() + 0.05 * (x * 0.37).sin().abs(),
                    ),
                    ("accuracy".into(), 1.0 - 0.9 / x.sqrt()),
                ],
                recorded_at: Utc::now(),
            })
            .await
            .unwrap();
    }
    // And 100,000 lines of output, every fifth a metrics line.
    for chunk in 0..LOG_LINES / 1000 {
        let lines: Vec<NewLogLine> = (chunk * 1000..(chunk + 1) * 1000)
            .map(|n| NewLogLine {
                stream: "stdout".into(),
                line: if n % 5 == 4 {
                    format!(r#"{{"drover": "metrics", "step": {n}, "values": {{"loss": 0.5}}}}"#)
                } else {
                    format!("step {n}: loss 0.5, {} samples/s", 1000 + n % 97)
                },
                logged_at: Utc::now(),
            })
            .collect();
        store.append_logs(&key, &lines).await.unwrap();
    }
    println!(
        "seeded {} ({JOBS} jobs, {} metric points, {LOG_LINES} log lines) in {:.1} s",
        if postgres { "Postgres" } else { "SQLite" },
        STEPS * 2,
        seeding.elapsed().as_secs_f64()
    );

    // As on every server: a runtime whose observer keeps each job's aggregates between requests.
    let checkpoints = tempfile::tempdir().unwrap();
    let runtime = Runtime::replica(
        store.clone(),
        RuntimeConfig::new("drover", checkpoints.path().to_owned()),
        drover_runtime::leader::always(),
    );
    let state = AppState::new(store, 1 << 20).with_runtime(runtime);
    let app = drover_api::routes::app_with(state, drover_web::router());
    let cookie = format!("{}={session}", auth::SESSION_COOKIE);
    let fetch = async |path: &str| -> (f64, usize) {
        let request = Request::get(path)
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap();
        let started = Instant::now();
        let response = app.clone().oneshot(request).await.unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (started.elapsed().as_secs_f64() * 1000.0, body.len())
    };
    let (_, css) = fetch("/static/app.css").await;
    let (_, js) = fetch("/static/app.js").await;
    println!(
        "static assets: app.css {css} B, app.js {js} B (cached by the browser after the first page)"
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>12} {:>14}",
        "page", "p50 ms", "p99 ms", "max ms", "page bytes", "first load B"
    );
    let (cold, _) = fetch(&format!("/jobs/{}", big.0)).await;
    println!(
        "job detail, first view on this replica (the observer reads all 100,000 points once): {cold:.1} ms"
    );
    let pages = [
        ("jobs list (newest 50 of 10,000)", "/jobs".to_owned()),
        (
            "jobs list, filtered by label and name",
            "/jobs?label=team%3Dt3&name=job-09".to_owned(),
        ),
        (
            "job detail (100,000 metric points)",
            format!("/jobs/{}", big.0),
        ),
        (
            "job chart alone (loss, log, smoothed)",
            format!("/jobs/{}/chart?metrics=loss&log=true&smooth=0.6", big.0),
        ),
        ("overview", "/".to_owned()),
        ("queue (10,000 queued)", "/queue".to_owned()),
        (
            "log, newest 500 of 100,000 lines",
            format!("/jobs/{}/logs", big.0),
        ),
        (
            "log, first 500 lines",
            format!("/jobs/{}/logs?after=0", big.0),
        ),
        // A search reads 25,000 lines a page: the newest span (no match there), then the span
        // from the first line (where one match is), as the page's links go.
        (
            "log searched, newest 25,000 lines",
            format!("/jobs/{}/logs?q=step+4998", big.0),
        ),
        (
            "log searched, first 25,000 lines",
            format!("/jobs/{}/logs?q=step+4998&after=0", big.0),
        ),
        ("tenants and users", "/tenants".to_owned()),
        ("nodes", "/nodes".to_owned()),
    ];
    for (name, path) in pages {
        let mut times = Vec::with_capacity(RUNS);
        let mut bytes = 0;
        fetch(&path).await;
        for _ in 0..RUNS {
            let (ms, size) = fetch(&path).await;
            times.push(ms);
            bytes = size;
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "{name:<44} {:>9.2} {:>9.2} {:>9.2} {bytes:>12} {:>14}",
            at(0.5),
            at(0.99),
            times[times.len() - 1],
            bytes + css + js
        );
    }
}
