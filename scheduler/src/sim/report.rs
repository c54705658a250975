//! What a simulation run reports: completion times, queueing, utilisation, fairness, restarts, load and
//! decision latency, as JSON and CSV.

use super::config::{Costs, Disruptions, Outcome};
use super::workload::Workload;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub policy: String,
    pub seed: u64,
    pub cluster_gpus: u32,
    pub jobs: usize,
    pub skipped_jobs: usize,
    pub offered_load: f64,
    pub avg_jct_s: f64,
    pub median_jct_s: f64,
    pub p99_jct_s: f64,
    pub makespan_s: f64,
    pub avg_queueing_s: f64,
    pub p99_queueing_s: f64,
    /// Busy GPU-seconds / (GPUs × makespan).
    pub gpu_utilisation: f64,
    /// ρ = completion time / recorded duration: the worst job's.
    pub max_rho: f64,
    /// Jain's index over the tenants' mean ρ (1 = equal).
    pub jain_index: f64,
    /// Each tenant's worst ρ.
    pub tenant_max_rho: BTreeMap<String, f64>,
    pub restarts_per_job: f64,
    /// Preemptions, suspensions, resizes and migrations of running jobs, over the run.
    pub disruptions: Disruptions,
    pub rounds: u64,
    pub round_latency_p50_us: f64,
    pub round_latency_p99_us: f64,
    pub arrival_latency_p50_us: f64,
    pub arrival_latency_p99_us: f64,
    pub costs: Costs,
    pub round_s: f64,
    /// The model-parallel jobs' figures, when the workload has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_parallel: Option<ModelParallelReport>,
    /// The same policy on the same workload with every model-parallel job held at its recorded
    /// shape (`drover sim` runs it when the workload has model-parallel jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldRun>,
}

/// What a run with the model-parallel jobs held at their shapes gave (the fixed-shape baseline).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeldRun {
    /// Every job's average JCT.
    pub avg_jct_s: f64,
    pub model_parallel: Option<ModelParallelReport>,
}

/// How a run treated the model-parallel jobs of its workload ([`super::parallel`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelParallelReport {
    pub jobs: usize,
    pub avg_jct_s: f64,
    pub median_jct_s: f64,
    /// The other jobs' average JCT.
    pub others_avg_jct_s: f64,
    /// Jobs whose replicas, averaged over the time they ran, were above, at and below the count
    /// their user asked for (within a quarter replica: at).
    pub grown: usize,
    pub held: usize,
    pub shrunk: usize,
    /// Per layout (stages × tensor, micro-batches), the replicas asked for and run at.
    pub layouts: Vec<LayoutRow>,
}

/// One layout's jobs in a [`ModelParallelReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayoutRow {
    pub stages: u32,
    pub tensor: u32,
    pub micro_batches: u32,
    pub jobs: usize,
    /// Mean over its jobs of the replicas asked for, of the time-weighted mean replicas each ran
    /// at, and of the most each ran at.
    pub asked_replicas: f64,
    pub mean_replicas: f64,
    pub max_replicas: f64,
    pub avg_jct_s: f64,
}

/// The model-parallel figures of a run, `None` when the workload has no model-parallel job.
pub fn model_parallel_report(
    workload: &Workload,
    outcome: &Outcome,
) -> Option<ModelParallelReport> {
    let mut jcts = Vec::new();
    let mut others = Vec::new();
    let (mut grown, mut held, mut shrunk) = (0, 0, 0);
    // Sums per (stages, tensor, micro-batches), made means below.
    let mut layouts: BTreeMap<(u32, u32, u32), LayoutRow> = BTreeMap::new();
    for ((job, out), truth) in workload
        .jobs
        .iter()
        .zip(&outcome.jobs)
        .zip(workload.truths.iter())
    {
        let jct = out.finish_s - out.submit_s;
        let Some(layout) = truth.model_parallel() else {
            others.push(jct);
            continue;
        };
        jcts.push(jct);
        let per_replica = f64::from(layout.per_replica());
        let asked = f64::from(job.recorded.workers) / per_replica;
        let mean = out.mean_workers / per_replica;
        if mean > asked + 0.25 {
            grown += 1;
        } else if mean < asked - 0.25 {
            shrunk += 1;
        } else {
            held += 1;
        }
        let row = layouts
            .entry((layout.stages, layout.tensor, layout.micro_batches))
            .or_insert(LayoutRow {
                stages: layout.stages,
                tensor: layout.tensor,
                micro_batches: layout.micro_batches,
                jobs: 0,
                asked_replicas: 0.0,
                mean_replicas: 0.0,
                max_replicas: 0.0,
                avg_jct_s: 0.0,
            });
        row.jobs += 1;
        row.asked_replicas += asked;
        row.mean_replicas += mean;
        row.max_replicas += f64::from(out.max_workers) / per_replica;
        row.avg_jct_s += jct;
    }
    if jcts.is_empty() {
        return None;
    }
    let jcts = sorted(jcts);
    Some(ModelParallelReport {
        jobs: jcts.len(),
        avg_jct_s: mean(&jcts),
        median_jct_s: percentile(&jcts, 0.5),
        others_avg_jct_s: mean(&others),
        grown,
        held,
        shrunk,
        layouts: layouts
            .into_values()
            .map(|sums| {
                let n = sums.jobs as f64;
                LayoutRow {
                    asked_replicas: sums.asked_replicas / n,
                    mean_replicas: sums.mean_replicas / n,
                    max_replicas: sums.max_replicas / n,
                    avg_jct_s: sums.avg_jct_s / n,
                    ..sums
                }
            })
            .collect(),
    })
}

/// One line of the per-job CSV.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub job: usize,
    pub tenant: String,
    pub model: String,
    pub gpus: u32,
    pub submit_s: f64,
    pub start_s: f64,
    pub finish_s: f64,
    pub jct_s: f64,
    pub rho: f64,
    pub restarts: u32,
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

pub fn job_rows(workload: &Workload, outcome: &Outcome) -> Vec<JobRow> {
    workload
        .jobs
        .iter()
        .zip(&outcome.jobs)
        .enumerate()
        .map(|(i, (job, out))| {
            let jct = out.finish_s - out.submit_s;
            JobRow {
                job: i,
                tenant: job.tenant.clone(),
                model: job.model.clone(),
                gpus: job.recorded.workers,
                submit_s: out.submit_s,
                start_s: out.first_start_s,
                finish_s: out.finish_s,
                jct_s: jct,
                rho: jct / job.recorded_duration_s.max(1.0),
                restarts: out.restarts,
            }
        })
        .collect()
}

pub fn build_report(
    policy: &str,
    seed: u64,
    round_s: f64,
    costs: Costs,
    workload: &Workload,
    outcome: &Outcome,
) -> Report {
    let rows = job_rows(workload, outcome);
    let gpus: u32 = workload.nodes.iter().map(|n| n.num_gpus()).sum();
    let jcts = sorted(rows.iter().map(|r| r.jct_s).collect());
    let queueing = sorted(rows.iter().map(|r| r.start_s - r.submit_s).collect());
    let first_submit = rows
        .iter()
        .map(|r| r.submit_s)
        .fold(f64::INFINITY, f64::min);
    let last_finish = rows
        .iter()
        .map(|r| r.finish_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan = if rows.is_empty() {
        0.0
    } else {
        last_finish - first_submit
    };
    let mut by_tenant: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for row in &rows {
        by_tenant
            .entry(row.tenant.clone())
            .or_default()
            .push(row.rho);
    }
    let tenant_means: Vec<f64> = by_tenant.values().map(|r| mean(r)).collect();
    let jain = {
        let sum: f64 = tenant_means.iter().sum();
        let squares: f64 = tenant_means.iter().map(|x| x * x).sum();
        if squares > 0.0 {
            sum * sum / (tenant_means.len() as f64 * squares)
        } else {
            1.0
        }
    };
    let micros = |ns: &[u64]| sorted(ns.iter().map(|&n| n as f64 / 1000.0).collect());
    let rounds = micros(&outcome.round_ns);
    let arrivals = micros(&outcome.arrival_ns);
    Report {
        policy: policy.to_owned(),
        seed,
        cluster_gpus: gpus,
        jobs: rows.len(),
        skipped_jobs: workload.skipped,
        offered_load: workload.offered_load(),
        avg_jct_s: mean(&jcts),
        median_jct_s: percentile(&jcts, 0.5),
        p99_jct_s: percentile(&jcts, 0.99),
        makespan_s: makespan,
        avg_queueing_s: mean(&queueing),
        p99_queueing_s: percentile(&queueing, 0.99),
        gpu_utilisation: if makespan > 0.0 {
            outcome.busy_gpu_s / (f64::from(gpus) * makespan)
        } else {
            0.0
        },
        max_rho: rows.iter().map(|r| r.rho).fold(0.0, f64::max),
        jain_index: jain,
        tenant_max_rho: by_tenant
            .iter()
            .map(|(t, r)| (t.clone(), r.iter().copied().fold(0.0, f64::max)))
            .collect(),
        restarts_per_job: mean(
            &rows
                .iter()
                .map(|r| f64::from(r.restarts))
                .collect::<Vec<_>>(),
        ),
        disruptions: outcome.disruptions,
        rounds: outcome.rounds,
        round_latency_p50_us: percentile(&rounds, 0.5),
        round_latency_p99_us: percentile(&rounds, 0.99),
        arrival_latency_p50_us: percentile(&arrivals, 0.5),
        arrival_latency_p99_us: percentile(&arrivals, 0.99),
        costs,
        round_s,
        model_parallel: model_parallel_report(workload, outcome),
        held: None,
    }
}

/// Each tenant's max ρ under `report` over its max ρ under `reference` (DRF, say), worst first.
pub fn tenant_rho_ratios(report: &Report, reference: &Report) -> Vec<(String, f64)> {
    let mut ratios: Vec<(String, f64)> = report
        .tenant_max_rho
        .iter()
        .filter_map(|(tenant, rho)| {
            let base = reference.tenant_max_rho.get(tenant)?;
            (*base > 0.0).then(|| (tenant.clone(), rho / base))
        })
        .collect();
    ratios.sort_by(|a, b| b.1.total_cmp(&a.1));
    ratios
}

/// The per-job rows as CSV.
pub fn jobs_csv(rows: &[JobRow]) -> String {
    let mut out =
        String::from("job,tenant,model,gpus,submit_s,start_s,finish_s,jct_s,rho,restarts\n");
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.4},{}\n",
            r.job,
            r.tenant,
            r.model,
            r.gpus,
            r.submit_s,
            r.start_s,
            r.finish_s,
            r.jct_s,
            r.rho,
            r.restarts
        ));
    }
    out
}

/// One line per report, the headline figures, as CSV.
pub fn summary_csv(reports: &[Report]) -> String {
    let mut out = String::from(
        "policy,jobs,avg_jct_s,median_jct_s,p99_jct_s,makespan_s,avg_queueing_s,gpu_utilisation,max_rho,jain_index,restarts_per_job,preemptions,suspensions,resizes,migrations,offered_load,round_p50_us,round_p99_us,arrival_p50_us,arrival_p99_us\n",
    );
    for r in reports {
        out.push_str(&format!(
            "{},{},{:.0},{:.0},{:.0},{:.0},{:.0},{:.4},{:.2},{:.4},{:.3},{},{},{},{},{:.3},{:.1},{:.1},{:.1},{:.1}\n",
            r.policy, r.jobs, r.avg_jct_s, r.median_jct_s, r.p99_jct_s, r.makespan_s, r.avg_queueing_s, r.gpu_utilisation,
            r.max_rho, r.jain_index, r.restarts_per_job, r.disruptions.preemptions, r.disruptions.suspensions,
            r.disruptions.resizes, r.disruptions.migrations, r.offered_load, r.round_latency_p50_us, r.round_latency_p99_us,
            r.arrival_latency_p50_us, r.arrival_latency_p99_us
        ));
    }
    out
}
