//! A borrower's priority against another tenant's guarantee (issue #50, item 2), on a real server
//! and two executors of 2 GPUs each: tenant `lender` runs four 1-GPU jobs within its guarantee of 4;
//! tenant `borrower` (no guarantee, at most 2 GPUs) submits a job of priority 1000, the most any
//! member may choose. It used to preempt the lender's jobs, which preempted it back, round after
//! round: within 20 s every job had gone through 22 generations, none progressing. Now the lender's
//! jobs keep their GPUs, the borrower's waits, and no job's generation moves for a minute.

use crate::rest::{Rest, command_job};
use drover_e2e::{ADMIN_TOKEN, Cluster};
use reqwest::Method;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowers_top_priority_neither_takes_a_guarantee_nor_livelocks_the_scheduler() {
    let cluster = Cluster::start_with_slots(2).await;
    let rest = Rest::new(&cluster.url);
    let lender = rest
        .user_token(
            ADMIN_TOKEN,
            "lender",
            json!({"guaranteed_gpus": 4, "max_gpus": 4}),
            "lena",
            "member",
        )
        .await;
    let borrower = rest
        .user_token(
            ADMIN_TOKEN,
            "borrower",
            json!({"guaranteed_gpus": 0, "max_gpus": 2}),
            "bo",
            "member",
        )
        .await;
    let mut lent = Vec::new();
    for i in 0..4 {
        let spec = command_job(&format!("guaranteed-{i}"), &["sleep", "600"], 0);
        lent.push(rest.submit(&lender, spec).await);
    }
    let state = async |id: &str| {
        rest.ok(
            Method::GET,
            &format!("/api/v1/jobs/{id}"),
            ADMIN_TOKEN,
            None,
        )
        .await["job"]
            .clone()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut running = 0;
        for id in &lent {
            running += usize::from(state(id).await["state"] == "running");
        }
        if running == lent.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lender's 4 jobs never all ran"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let urgent = rest
        .submit(
            &borrower,
            command_job("top-priority", &["sleep", "600"], 1000),
        )
        .await;

    // A minute of rounds (the server decides every 500 ms here and at every change).
    let mut first: HashMap<String, u64> = HashMap::new();
    let watched: Vec<&String> = lent.iter().chain([&urgent]).collect();
    let started = Instant::now();
    let mut last = HashMap::new();
    while started.elapsed() < Duration::from_secs(60) {
        for id in &watched {
            let job = state(id).await;
            let generation = job["generation"].as_u64().unwrap();
            first.entry((*id).clone()).or_insert(generation);
            last.insert((*id).clone(), job);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for id in &watched {
        let job = &last[*id];
        let moved = job["generation"].as_u64().unwrap() - first[*id];
        assert!(
            moved <= 2,
            "{} went through {moved} generations in a minute: {job}",
            job["name"]
        );
    }
    for id in &lent {
        let job = &last[id];
        assert_eq!(job["state"], "running", "{job}");
        assert_eq!(
            job["generation"], 1,
            "a guaranteed job was preempted: {job}"
        );
    }
    let waiting = &last[&urgent];
    assert_eq!(waiting["state"], "queued", "{waiting}");
    for id in watched {
        rest.ok(
            Method::POST,
            &format!("/api/v1/jobs/{id}/cancel"),
            ADMIN_TOKEN,
            Some(json!({})),
        )
        .await;
    }
}
