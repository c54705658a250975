//! `drover bench fleet` at a small size, so the emulator cannot rot: 50 emulated nodes of 8 GPUs
//! against a real server on Postgres, a job per GPU, then a reclaim. What it reports must add up:
//! every job started, the rounds and the server were measured, the urgent job ran on a reclaimed
//! GPU whose victim took its 2-s checkpoint and exited, and nothing failed.

use super::{DROVER, isolated_config, ok, repo_root};
use std::process::Command;

#[test]
fn the_fleet_emulator_fills_fifty_nodes_and_reclaims_a_gpu() {
    let output = Command::new(DROVER)
        .env("DROVER_CONFIG", isolated_config())
        .args(["bench", "fleet", "--database-url"])
        .arg(drover_store::testing::postgres_admin_url())
        .args([
            "--nodes",
            "50",
            "--gpus-per-node",
            "8",
            "--duration",
            "60s",
            "--idle",
            "3s",
            "--steady",
            "12s",
            "--checkpoint-delay",
            "2s",
            "-o",
            "json",
        ])
        .current_dir(repo_root())
        .output()
        .expect("run drover bench fleet");
    let stdout = ok(output);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect(&stdout);
    let number = |field: &str| {
        report[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} in {report:#}"))
    };
    assert_eq!(number("errors"), 0.0, "{report:#}");
    assert_eq!(number("jobs_submitted"), 400.0, "{report:#}");
    assert_eq!(number("jobs_started"), 400.0, "{report:#}");
    assert!(number("jobs_started_per_s") > 0.0, "{report:#}");
    let (p50, p99) = (
        number("submit_to_running_p50_s"),
        number("submit_to_running_p99_s"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 < 60.0, "{report:#}");
    assert!(number("rounds") >= 1.0, "{report:#}");
    assert!(number("round_p99_ms") > 0.0, "{report:#}");
    assert!(number("server_rss_mib") > 1.0, "{report:#}");
    assert!(number("server_cpu_percent") > 0.0, "{report:#}");
    assert!(number("postgres_transactions_per_s") > 0.0, "{report:#}");
    // The busy fleet's 400 tasks each report a step every 10 s: the database grows.
    let steady = &report["steady"];
    assert!(
        steady["rows_written_per_s"].as_f64() > Some(0.0),
        "{report:#}"
    );
    assert!(
        steady["database_growth_mib_per_hour"].as_f64() >= Some(0.0),
        "{report:#}"
    );
    assert!(number("database_mib") > 1.0, "{report:#}");
    // The urgent job ran on a reclaimed GPU; its victim checkpointed (2 s) and exited.
    let reclaim = number("reclaim_s");
    assert!(0.0 < reclaim && reclaim < 60.0, "{report:#}");
    assert!(
        number("reclaim_victim_exited_s") >= 2.0,
        "the victim exited before its checkpoint could have been taken: {report:#}"
    );
    assert!(number("tasks_checkpointed_on_stop") >= 1.0, "{report:#}");
}
