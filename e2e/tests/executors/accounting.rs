//! Queue predictions and GPU accounting on a real server and two executors of one GPU each: two jobs
//! fill the cluster, one of them is killed (a task failure, restarted from its checkpoint), a job of
//! higher priority preempts the other; the preempted job waits with a predicted start, and once all
//! have finished the ledger accounts for every GPU-second: allocated = used + lost by cause, within
//! what two GPUs could hold over the run, with the preemption and the failure each costing some.

use super::harness::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

fn job(name: &str, steps: u32, priority: i32) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "scheduling": {"priority": priority},
            "command": {
                "argv": ["python3", "examples/command/digits_softmax.py", "--steps", steps.to_string(),
                         "--checkpoint-every", "200", "--eval-every", "100",
                         "--step-sleep", "0.004"],
                "env": {"PYTHONUNBUFFERED": "1"}
            },
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1},
            "max_restarts": 2
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_predictions_and_gpu_accounting_add_up_through_a_preemption_and_a_kill() {
    let started = Instant::now();
    let since = chrono::Utc::now() - chrono::Duration::minutes(1);
    let cluster = Cluster::start().await;
    let id = |v: Value| v["job"]["id"].as_str().unwrap().to_owned();
    let killed = id(cluster.post("/api/v1/jobs", job("killed", 3000, 0)).await);
    let victim = id(cluster.post("/api/v1/jobs", job("victim", 3000, 0)).await);
    let node = cluster.wait_for_checkpoint(&killed, 200).await;
    cluster.wait_for_checkpoint(&victim, 200).await;

    // Kill the training process of one job: a task failure, restarted from its checkpoint.
    let dir = cluster.executor_dir(&node);
    let pids: Vec<u32> = processes_under(&dir)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("digits_softmax"))
        })
        .collect();
    assert!(
        !pids.is_empty(),
        "no training process under {}",
        dir.display()
    );
    for pid in pids {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    cluster
        .wait_until(
            "the killed job to restart",
            Duration::from_secs(60),
            async |c| {
                let job = c.job(&killed).await;
                (job["generation"].as_u64() >= Some(2) && job["state"] == "running").then_some(())
            },
        )
        .await;

    // A job of higher priority takes the other job's GPU.
    let urgent = id(cluster.post("/api/v1/jobs", job("urgent", 1500, 10)).await);
    // The job preempted for it says whom it made room for, and under which rule.
    cluster
        .wait_until(
            "a job preempted for the urgent one",
            Duration::from_secs(60),
            async |c| {
                for candidate in [&victim, &killed] {
                    let events = c.events(candidate).await;
                    let for_urgent = events.iter().any(|e| {
                        e["reason"] == "preempted"
                            && e["message"]
                                .as_str()
                                .unwrap()
                                .contains("urgent (tenant default, priority 10")
                    });
                    if for_urgent {
                        return Some(());
                    }
                }
                None
            },
        )
        .await;
    // Every queued job gets a predicted start within a round or two of the forecaster.
    let queue = cluster
        .wait_until(
            "a predicted start for every queued job",
            Duration::from_secs(30),
            async |c| {
                let queue = c.get("/api/v1/queue").await;
                let jobs = queue["jobs"].as_array().unwrap().clone();
                let queued = c.get("/api/v1/jobs?state=queued").await["jobs"]
                    .as_array()
                    .unwrap()
                    .len();
                (!jobs.is_empty()
                    && jobs.len() == queued
                    && jobs
                        .iter()
                        .all(|j| j["predicted_start"].is_string() && j["position"].is_u64()))
                .then_some(queue)
            },
        )
        .await;
    assert_eq!(queue["policy"], "drover");
    let entry = queue["jobs"][0].clone();
    let waiting = entry["id"].as_str().unwrap().to_owned();
    assert!(waiting == victim || waiting == killed, "{queue}");
    // It waits for a running job to finish: later than now, within the hour these jobs take.
    let start: chrono::DateTime<chrono::Utc> =
        entry["predicted_start"].as_str().unwrap().parse().unwrap();
    assert!(
        start > chrono::Utc::now() - chrono::Duration::seconds(5),
        "{entry}"
    );
    assert!(
        start < chrono::Utc::now() + chrono::Duration::hours(2),
        "{entry}"
    );
    let shown = cluster.job(&waiting).await;
    assert!(
        shown["state"] != "queued" || shown["queue"]["position"].is_u64(),
        "{shown}"
    );
    let table = drover_cli(&cluster, &["queue"]);
    assert!(
        table.contains("START (P10 – P90)")
            && (table.contains("victim") || table.contains("killed")),
        "{table}"
    );

    for job in [&killed, &victim, &urgent] {
        cluster
            .wait_for_state(job, "succeeded", Duration::from_secs(240))
            .await;
    }
    // Long after they registered (three jobs of thousands of steps ran since), the nodes' last
    // heartbeat is the live one, within the 3-s executor timeout (it showed the registration time,
    // so healthy nodes looked dead).
    let nodes = cluster.get("/api/v1/nodes").await;
    let ran = started.elapsed();
    for node in nodes["nodes"].as_array().unwrap() {
        let at = |field: &str| -> chrono::DateTime<chrono::Utc> {
            node[field].as_str().unwrap().parse().unwrap()
        };
        let heard = chrono::Utc::now() - at("last_heartbeat_at");
        assert!(heard < chrono::Duration::seconds(3), "{node}");
        let registered = chrono::Utc::now() - at("created_at");
        assert!(
            registered > chrono::Duration::seconds(10),
            "{node} after {ran:?}"
        );
        // The host's CPU and memory use from the OS, now and over the last minutes.
        let host = &node["host_usage"];
        assert!(host["memory_total_gb"].as_f64().unwrap() > 0.0, "{node}");
        let cpu = host["cpu_utilization"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&cpu), "{node}");
        let history = node["history"].as_array().unwrap();
        assert!(
            history.len() >= 2
                && history
                    .iter()
                    .all(|p| p["memory_used_gb"].as_f64().unwrap() > 0.0),
            "{node}"
        );
    }
    let elapsed_h = started.elapsed().as_secs_f64() / 3600.0;
    // The loop closes each allocation once its tasks have ended: give it a round.
    let from = since.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let usage = cluster
        .wait_until(
            "every allocation closed",
            Duration::from_secs(20),
            async |c| {
                let usage = c.get(&format!("/api/v1/usage?by=job&from={from}")).await;
                let rows = usage["rows"].as_array().unwrap().clone();
                let preemption =
                    |r: &Value| r["lost_by_cause"]["preemption"].as_f64().unwrap_or(0.0);
                let failure = |r: &Value| r["lost_by_cause"]["failure"].as_f64().unwrap_or(0.0);
                (rows.len() == 3
                    && rows.iter().any(|r| preemption(r) > 0.0)
                    && rows.iter().any(|r| failure(r) > 0.0))
                .then_some(usage)
            },
        )
        .await;
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let rows = usage["rows"].as_array().unwrap();
    let mut allocated = 0.0;
    for row in rows {
        let lost: f64 = row["lost_by_cause"]
            .as_object()
            .unwrap()
            .values()
            .map(f)
            .sum();
        let a = f(&row["allocated_gpu_hours"]);
        assert!((f(&row["used_gpu_hours"]) + lost - a).abs() < 1e-9, "{row}");
        assert!(f(&row["used_gpu_hours"]) > 0.0, "{row}");
        allocated += a;
    }
    assert!((allocated - f(&usage["total"]["allocated_gpu_hours"])).abs() < 1e-9);
    // Two GPUs cannot hold more than twice the run's length.
    assert!(
        allocated <= 2.0 * elapsed_h + 1e-6,
        "{allocated} GPU-h in {elapsed_h} h"
    );
    let row = |name: &str| rows.iter().find(|r| r["job"] == name).unwrap();
    assert!(
        f(&row("killed")["lost_by_cause"]["failure"]) > 0.0,
        "{}",
        row("killed")
    );
    let preemption = |r: &Value| f(&r["lost_by_cause"]["preemption"]);
    assert!(
        preemption(row("victim")) + preemption(row("killed")) > 0.0,
        "{rows:?}"
    );
    // Each job ran for its steps: at least the time its steps sleep, on one GPU.
    assert!(
        f(&row("urgent")["used_gpu_hours"]) >= 1500.0 * 0.004 / 3600.0,
        "{}",
        row("urgent")
    );

    // The same figures as CSV through the CLI.
    let csv = drover_cli(
        &cluster,
        &["usage", "--by", "job", "--from", &from, "--csv"],
    );
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().contains("lost_preemption"), "{csv}");
    assert_eq!(lines.count(), 3, "{csv}");
}
