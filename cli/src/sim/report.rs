//! What `drover sim` prints and writes besides its report: the policies' table, prediction accuracy
//! and experiment rows, and their CSV files (the settings a run used are printed by `workload.rs`).

use crate::output::out;
use drover_scheduler::sim::experiments::ExperimentRow;
use drover_scheduler::sim::predict::Accuracy;
use drover_scheduler::sim::{self, Outcome, Report};
use std::time::Duration;

pub(super) fn print_table(reports: &[Report]) {
    let baseline = reports
        .iter()
        .find(|r| r.policy == "fifo")
        .map(|r| r.avg_jct_s);
    let hours = |s: f64| format!("{:.2}h", s / 3600.0);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                r.jobs.to_string(),
                format!("{:.0}", r.avg_jct_s),
                hours(r.median_jct_s),
                hours(r.p99_jct_s),
                hours(r.makespan_s),
                hours(r.avg_queueing_s),
                format!("{:.1}%", 100.0 * r.gpu_utilisation),
                format!("{:.1}", r.max_rho),
                format!("{:.3}", r.jain_index),
                format!("{:.2}", r.restarts_per_job),
                r.disruptions.preemptions.to_string(),
                r.disruptions.suspensions.to_string(),
                r.disruptions.resizes.to_string(),
                r.disruptions.migrations.to_string(),
                format!("{:.2}", r.round_latency_p99_us / 1000.0),
                baseline.map_or_else(|| "-".to_owned(), |b| format!("{:.2}x", b / r.avg_jct_s)),
            ]
        })
        .collect();
    crate::output::table(
        &[
            "POLICY",
            "JOBS",
            "AVG JCT (s)",
            "MEDIAN",
            "P99",
            "MAKESPAN",
            "AVG QUEUE",
            "GPU UTIL",
            "MAX RHO",
            "JAIN",
            "RESTARTS/JOB",
            "PREEMPT",
            "SUSPEND",
            "RESIZE",
            "MIGRATE",
            "ROUND P99 (ms)",
            "VS FIFO",
        ],
        &rows,
    );
    if let Some(drf) = reports.iter().find(|r| r.policy == "drf") {
        for report in reports.iter().filter(|r| r.policy != "drf") {
            if let Some((tenant, ratio)) = sim::tenant_rho_ratios(report, drf).first() {
                out!(
                    "{}: worst tenant max rho {:.2}x its max rho under drf ({})",
                    report.policy,
                    ratio,
                    tenant
                );
            }
        }
    }
}

/// The model-parallel jobs under each policy: sized by the policy and held at their recorded
/// shapes ([`Report::held`]): their JCT, and per layout the replicas asked for and run at.
pub(super) fn print_model_parallel(reports: &[Report]) {
    let hours = |s: f64| format!("{:.2}h", s / 3600.0);
    let mut rows = Vec::new();
    for sized in reports {
        let Some(fixed) = &sized.held else {
            continue;
        };
        let (Some(m), Some(f)) = (&sized.model_parallel, &fixed.model_parallel) else {
            continue;
        };
        rows.push(vec![
            sized.policy.clone(),
            m.jobs.to_string(),
            format!("{:.0}", m.avg_jct_s),
            format!("{:.0}", f.avg_jct_s),
            format!("{:.2}x", f.avg_jct_s / m.avg_jct_s.max(1e-9)),
            hours(m.median_jct_s),
            hours(f.median_jct_s),
            format!("{}/{}/{}", m.grown, m.held, m.shrunk),
            format!("{:.0}", m.others_avg_jct_s),
            format!("{:.0}", f.others_avg_jct_s),
            format!("{:.0}", sized.avg_jct_s),
            format!("{:.0}", fixed.avg_jct_s),
        ]);
    }
    if rows.is_empty() {
        return;
    }
    out!("");
    out!("model-parallel jobs: sized by the policy vs held at the shape their user asked for");
    crate::output::table(
        &[
            "POLICY",
            "JOBS",
            "AVG JCT SIZED (s)",
            "HELD (s)",
            "HELD/SIZED",
            "MEDIAN SIZED",
            "HELD",
            "GROWN/AT/SHRUNK",
            "OTHERS SIZED (s)",
            "HELD (s)",
            "ALL SIZED (s)",
            "HELD (s)",
        ],
        &rows,
    );
    let mut layout_rows = Vec::new();
    for report in reports {
        let Some(m) = &report.model_parallel else {
            continue;
        };
        for l in &m.layouts {
            layout_rows.push(vec![
                report.policy.clone(),
                format!("{}x{}", l.stages, l.tensor),
                l.micro_batches.to_string(),
                l.jobs.to_string(),
                format!("{:.2}", l.asked_replicas),
                format!("{:.2}", l.mean_replicas),
                format!("{:.2}", l.max_replicas),
                format!("{:.0}", l.avg_jct_s),
            ]);
        }
    }
    out!("");
    out!("replicas per layout (stages x tensor), sized by the policy");
    crate::output::table(
        &[
            "POLICY",
            "LAYOUT",
            "MICRO-BATCHES",
            "JOBS",
            "ASKED",
            "MEAN RUN",
            "MOST",
            "AVG JCT (s)",
        ],
        &layout_rows,
    );
}

/// One row per prediction: when it was made, what it said, and when the job really started.
pub(super) fn predictions_csv(outcome: &Outcome) -> String {
    let mut csv = String::from(
        "job,submit_s,made_at_s,predicted_start_s,predicted_p10_s,predicted_p90_s,actual_start_s\n",
    );
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.0}"));
    for record in &outcome.predictions {
        let Some(actual) = outcome.jobs.get(record.job) else {
            continue;
        };
        csv.push_str(&format!(
            "{},{:.0},{:.0},{},{},{},{:.0}\n",
            record.job,
            actual.submit_s,
            record.made_at_s,
            cell(record.start_s),
            cell(record.start_p10_s),
            cell(record.start_p90_s),
            actual.first_start_s
        ));
    }
    csv
}

pub(super) fn print_accuracy(rows: &[(String, Accuracy, Duration)]) {
    out!();
    out!("Start predictions made at submission, for jobs that waited over 10 minutes:");
    out!();
    out!(
        "| policy | predictions | waits > 10 min | median error | p90 error | within p10–p90 | beyond horizon | run time |"
    );
    out!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let pct = |v: f64| {
        if v.is_finite() {
            format!("{:.1}%", 100.0 * v)
        } else if v.is_nan() {
            "–".to_owned()
        } else {
            "∞".to_owned()
        }
    };
    for (name, a, took) in rows {
        out!(
            "| `{name}` | {} | {} | {} | {} | {} | {} | {:.0} s |",
            a.predictions,
            a.long_waits,
            pct(a.median_error),
            pct(a.p90_error),
            pct(a.within_band),
            pct(a.beyond_horizon),
            took.as_secs_f64()
        );
    }
}

/// Per policy: the searches' mean time to their first full-fidelity result and to their end, their
/// mean best value and the GPU-hours their trials used.
pub(super) fn print_experiments(runs: &[(String, Vec<ExperimentRow>)]) {
    let hours = |s: f64| format!("{:.2}h", s / 3600.0);
    let mean = |values: Vec<f64>| {
        let n = values.len().max(1) as f64;
        values.iter().sum::<f64>() / n
    };
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(policy, rows)| {
            let full: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.first_full_s.map(|t| t - r.submit_s))
                .collect();
            let best_at: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.best_at_s.map(|t| t - r.submit_s))
                .collect();
            let best: Vec<f64> = rows.iter().filter_map(|r| r.best).collect();
            vec![
                policy.clone(),
                rows.len().to_string(),
                rows.iter().map(|r| r.trials).sum::<usize>().to_string(),
                if full.len() == rows.len() {
                    hours(mean(full))
                } else {
                    format!("{} of {}", full.len(), rows.len())
                },
                hours(mean(best_at)),
                hours(mean(rows.iter().map(|r| r.finish_s - r.submit_s).collect())),
                format!("{:.4}", mean(best)),
                format!("{:.0}", rows.iter().map(|r| r.gpu_hours).sum::<f64>()),
            ]
        })
        .collect();
    crate::output::table(
        &[
            "POLICY",
            "EXPERIMENTS",
            "TRIALS",
            "FIRST FULL RESULT",
            "TIME TO BEST",
            "EXPERIMENT TIME",
            "MEAN BEST LOSS",
            "TRIAL GPU-H",
        ],
        &rows,
    );
}

pub(super) fn experiments_csv(runs: &[(String, Vec<ExperimentRow>)]) -> String {
    let mut csv = String::from(
        "policy,experiment,tenant,submit_s,first_full_s,best_at_s,finish_s,best,trials,gpu_hours\n",
    );
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for (policy, rows) in runs {
        for (i, r) in rows.iter().enumerate() {
            csv.push_str(&format!(
                "{policy},{i},{},{:.0},{},{},{:.0},{},{},{:.2}\n",
                r.tenant,
                r.submit_s,
                cell(r.first_full_s),
                cell(r.best_at_s),
                r.finish_s,
                cell(r.best),
                r.trials,
                r.gpu_hours
            ));
        }
    }
    csv
}
