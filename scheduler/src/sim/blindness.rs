//! The simulator keeps its hidden truth from the policies: two workloads that differ in everything
//! hidden (which measured model each job trains, hence its speed surface and CPU use; its length; its
//! loss curve; how packed jobs interfere) show every non-oracle policy the same jobs, and each such
//! policy decides alike in both until what it observes differs.

use super::config::{Interference, SimConfig, Stopwatch};
use super::speed::MeasuredModel;
use super::truth::Surface;
use super::workload::{Workload, WorkloadOptions, build_workload_with};
use super::{engine, parse_models, parse_trace};
use crate::Plan;
use crate::cluster::uniform_cluster;
use crate::policy::{Oracle, Policy, PolicyError, build_policy, is_oracle_policy, policy_names};
use crate::snapshot::{ClusterSnapshot, JobView};
use std::sync::{Arc, Mutex};

fn models() -> Vec<MeasuredModel> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        panic!("{path} must exist: data/models/ in the repository");
    };
    let Ok(models) = parse_models(&text) else {
        panic!("the measurements parse");
    };
    models
}

/// 40 jobs on two tenants, 1 to 8 GPUs, the first ten at once and the rest over 75 minutes; `length`
/// scales every recorded duration (the trace's durations are what the simulator makes each job's
/// true length of).
fn trace(length: f64) -> String {
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..40u32 {
        let gpus = [1, 2, 1, 4, 8, 1, 2, 1][(i % 8) as usize];
        let duration = f64::from(900 + (i * 4801) % 7_000) * length;
        let submit = i.saturating_sub(10) * 150;
        text.push_str(&format!("{submit},{duration:.0},{gpus},vc{}\n", i % 2));
    }
    text
}

fn workload(length: f64, models: &[MeasuredModel]) -> Workload {
    let Ok(trace) = parse_trace(&trace(length), &super::TraceFilter::default()) else {
        panic!("the trace parses");
    };
    build_workload_with(
        &trace,
        models,
        uniform_cluster(3, 8, 64, 256),
        &WorkloadOptions {
            seed: 7,
            // Some jobs model-parallel: their layouts are shown, their speed surfaces hidden.
            model_parallel: 0.4,
            ..WorkloadOptions::default()
        },
    )
}

/// The same trace and seed with every hidden quantity changed: the measured models in the opposite
/// order (each job draws another model: another speed surface, CPU use and step noise), durations
/// 2.5 times as long, every loss curve reshaped, and every model-parallel job's surface redrawn.
fn hidden_changed(models: &[MeasuredModel]) -> Workload {
    let reversed: Vec<MeasuredModel> = models.iter().rev().cloned().collect();
    let mut changed = workload(2.5, &reversed);
    let mut truths = (*changed.truths).clone();
    for truth in &mut truths {
        let (a, k0, alpha, c) = truth.loss;
        truth.loss = (a * 3.0, k0 * 0.5, (alpha * 1.5).min(0.95), c * 0.2);
        if let Surface::ModelParallel(p) = &mut truth.surface {
            p.gradients = 0.55 - p.gradients;
            p.tensor_cost *= 2.0;
            p.micro_batch_cost = 0.11 - p.micro_batch_cost;
            p.hand_over *= 3.0;
        }
    }
    changed.truths = Arc::new(truths);
    changed
}

/// Every decision a policy makes, with what it was shown.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Round(ClusterSnapshot, Plan),
    Arrival(ClusterSnapshot, Box<JobView>, crate::plan::JobPlan),
}

impl Decision {
    fn shown(&self) -> (&ClusterSnapshot, Option<&JobView>) {
        match self {
            Decision::Round(snapshot, _) => (snapshot, None),
            Decision::Arrival(snapshot, job, _) => (snapshot, Some(&**job)),
        }
    }
}

/// A policy that writes down every decision of the one it wraps.
#[derive(Debug)]
struct Recording {
    inner: Box<dyn Policy>,
    decisions: Arc<Mutex<Vec<Decision>>>,
}

impl Policy for Recording {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn schedule(&mut self, snapshot: &ClusterSnapshot, previous: &Plan) -> Plan {
        let plan = self.inner.schedule(snapshot, previous);
        if let Ok(mut decisions) = self.decisions.lock() {
            decisions.push(Decision::Round(snapshot.clone(), plan.clone()));
        }
        plan
    }
    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> crate::plan::JobPlan {
        let plan = self.inner.place_arrival(snapshot, job);
        if let Ok(mut decisions) = self.decisions.lock() {
            decisions.push(Decision::Arrival(
                snapshot.clone(),
                Box::new(job.clone()),
                plan.clone(),
            ));
        }
        plan
    }
    fn fork(&self, oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        // Forecasts fork the policy; what a fork decides is not the replay's.
        self.inner.fork(oracle)
    }
}

struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

fn decisions(name: &str, workload: &Workload, interference: Interference) -> Vec<Decision> {
    let Ok(inner) = build_policy(name, None) else {
        panic!("{name} builds without an oracle");
    };
    let decisions = Arc::new(Mutex::new(Vec::new()));
    let mut policy = Recording {
        inner,
        decisions: decisions.clone(),
    };
    let config = SimConfig {
        interference,
        ..SimConfig::default()
    };
    if let Err(err) = engine::simulate(workload, &mut policy, config, None, None, None, &Frozen) {
        panic!("{name}: {err}");
    }
    let Ok(decisions) = decisions.lock() else {
        panic!("poisoned");
    };
    decisions.clone()
}

#[test]
fn every_job_is_shown_alike_whatever_is_hidden() {
    let models = models();
    let (a, b) = (workload(1.0, &models), hidden_changed(&models));
    assert_eq!(a.jobs.len(), b.jobs.len());
    let (mut differ, mut parallel) = (0, 0);
    for (x, y) in a.jobs.iter().zip(&b.jobs) {
        assert_eq!(
            x.view, y.view,
            "what a policy is shown of a job depends on hidden truth"
        );
        differ += usize::from(x.model != y.model);
        parallel += usize::from(x.view.worker_step > 1);
    }
    assert!(parallel >= 3, "{parallel} model-parallel jobs");
    assert!(
        differ > 10,
        "the change reaches the truth: {differ} models differ"
    );
}

#[test]
fn no_policy_but_an_oracle_decides_otherwise_until_it_observes_otherwise() {
    let models = models();
    let (a, b) = (workload(1.0, &models), hidden_changed(&models));
    for name in policy_names() {
        if is_oracle_policy(name) {
            continue;
        }
        let seen_a = decisions(name, &a, Interference::Drawn);
        let seen_b = decisions(name, &b, Interference::Fixed(0.9));
        let mut compared = 0;
        for (x, y) in seen_a.iter().zip(&seen_b) {
            if x.shown() != y.shown() {
                break;
            }
            assert_eq!(
                x, y,
                "{name}: decision {compared} differs on the same observations"
            );
            compared += 1;
        }
        assert!(
            compared >= 2,
            "{name}: only {compared} decisions were made on the same observations"
        );
        assert_ne!(
            seen_a, seen_b,
            "{name}: the runs never diverged; the change did not reach what is observed"
        );
    }
}
