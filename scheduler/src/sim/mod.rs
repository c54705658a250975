//! The trace-replay simulator: a virtual cluster and clock, jobs with a hidden ground truth (speed
//! surface from measurements, loss curve, length), and the very policies the server runs.

#[cfg(test)]
mod blindness;
pub mod config;
pub mod engine;
pub mod experiments;
pub mod gavel;
pub mod parallel;
pub mod predict;
pub mod report;
pub mod speed;
pub mod svg;
pub mod trace;
pub mod truth;
pub mod workload;

pub use config::{
    Change, Costs, Disruptions, Interference, JobOutcome, Outcome, SimConfig, SimError, Stopwatch,
};
pub use report::{Report, build_report, job_rows, jobs_csv, summary_csv, tenant_rho_ratios};
pub use speed::{MeasuredModel, parse_models};
pub use trace::{TraceFilter, TraceJob, parse_time, parse_trace};
pub use workload::{
    Quotas, RecordedPs, Workload, WorkloadOptions, build_workload, build_workload_with,
};

use crate::policy::{PolicyError, build_policy, is_oracle_policy};
use std::sync::{Arc, Mutex};
use truth::{OracleState, SimOracle, checkpoint_factor};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// The oracle an oracle baseline gets for `workload`, and the state the engine keeps it up to date with.
pub fn oracle_for(workload: &Workload, config: &SimConfig) -> (SimOracle, Arc<Mutex<OracleState>>) {
    let state = Arc::new(Mutex::new(OracleState {
        steps_done: vec![0.0; workload.jobs.len()],
    }));
    let oracle = SimOracle {
        truths: workload.truths.clone(),
        state: state.clone(),
        checkpoint_factor: checkpoint_factor(
            config.costs.checkpoint_every_s,
            config.costs.checkpoint_s,
        ),
        model_tags: workload
            .gpu_models
            .iter()
            .map(|m| crate::cluster::GpuModelTag::of(m))
            .collect(),
    };
    (oracle, state)
}

/// Replays `workload` through the policy named `policy`.
pub fn run_policy(
    policy: &str,
    workload: &Workload,
    config: SimConfig,
    stopwatch: &dyn Stopwatch,
) -> Result<(Report, Outcome), RunError> {
    run_policy_predicting(policy, workload, config, None, stopwatch)
}

/// [`run_policy`], and with `predict`, a start prediction for waiting arrivals
/// ([`Outcome::predictions`]; [`predict::accuracy`] scores them).
pub fn run_policy_predicting(
    policy: &str,
    workload: &Workload,
    config: SimConfig,
    predict: Option<predict::PredictOptions>,
    stopwatch: &dyn Stopwatch,
) -> Result<(Report, Outcome), RunError> {
    run_policy_with(policy, workload, config, predict, None, stopwatch)
}

/// [`run_policy_predicting`], with jobs made while it runs by `spawner` (a searcher's trials).
pub fn run_policy_with(
    policy: &str,
    workload: &Workload,
    config: SimConfig,
    predict: Option<predict::PredictOptions>,
    spawner: Option<&mut dyn engine::Spawner>,
    stopwatch: &dyn Stopwatch,
) -> Result<(Report, Outcome), RunError> {
    let (mut policy_impl, state) = if is_oracle_policy(policy) {
        let (oracle, state) = oracle_for(workload, &config);
        (build_policy(policy, Some(Box::new(oracle)))?, Some(state))
    } else {
        (build_policy(policy, None)?, None)
    };
    let outcome = engine::simulate(
        workload,
        policy_impl.as_mut(),
        config,
        state,
        predict,
        spawner,
        stopwatch,
    )?;
    let report = build_report(
        policy,
        config.seed,
        config.round_s,
        config.costs,
        workload,
        &outcome,
    );
    Ok((report, outcome))
}
