//! The scheduler and the searcher talking: trials ordered by their hints, and searches run in the
//! simulator by Drover's own searcher.

#[expect(dead_code, reason = "builders shared with the other scheduler tests")]
mod common;

use common::{job, snapshot};
use drover_core::ExperimentId;
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::sim::experiments::{ExperimentOptions, Experiments};
use drover_scheduler::sim::{self, SimConfig, Stopwatch, TraceFilter};
use drover_scheduler::{JobView, Plan, SearchHint, build_policy, invariants};

/// A one-GPU job that takes its GPU whole (no packing).
fn whole(id: u128, submit: f64) -> JobView {
    let mut view = job(id, 1, submit);
    view.gpu_memory_gb = None;
    view
}

fn trial(id: u128, experiment: u128, promise: f64, doomed: bool, submit: f64) -> JobView {
    let mut view = whole(id, submit);
    view.search = Some(SearchHint {
        experiment: ExperimentId(uuid::Uuid::from_u128(experiment)),
        promise,
        doomed,
    });
    view
}

fn running(plan: &Plan, ids: &[u128]) -> Vec<u128> {
    ids.iter()
        .copied()
        .filter(|&i| plan.placement(common::id(i)).is_some())
        .collect()
}

#[test]
fn with_two_gpus_for_three_trials_the_promising_ones_run_and_the_doomed_one_waits() {
    // Least attained service alone would run the two youngest trials (0 and 1, submitted first and
    // none has run); the hints say 2 is the most promising and 0 is doomed.
    let jobs = vec![
        trial(0, 9, 0.9, true, 0.0),
        trial(1, 9, 0.2, false, 1.0),
        trial(2, 9, 0.8, false, 2.0),
    ];
    let snap = snapshot(1, 2, jobs);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    invariants::check(&snap, &plan).unwrap();
    assert_eq!(running(&plan, &[0, 1, 2]), vec![1, 2]);
    let blind = build_policy("drover-no-search", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert_eq!(running(&blind, &[0, 1, 2]), vec![0, 1]);
}

#[test]
fn a_doomed_trial_gives_its_place_to_its_experiments_other_trials_and_to_nobody_else() {
    // One GPU; the doomed trial came first. An ordinary job of the same tenant does not take its
    // place: the experiment's share is the experiment's.
    let snap = snapshot(1, 1, vec![trial(0, 9, 0.5, true, 0.0), whole(1, 1.0)]);
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert_eq!(running(&plan, &[0, 1]), vec![0]);
    // A trial of its own experiment that is not doomed does, even one less promising.
    let snap = snapshot(
        1,
        1,
        vec![
            trial(0, 9, 0.5, true, 0.0),
            whole(1, 1.0),
            trial(2, 9, 0.1, false, 2.0),
        ],
    );
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    assert_eq!(running(&plan, &[0, 1, 2]), vec![2]);
}

#[test]
fn a_running_trial_keeps_its_gpu_against_a_waiting_one_barely_ahead() {
    let mut snap = snapshot(1, 1, vec![trial(0, 9, 0.50, false, 0.0)]);
    let first = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    snap.jobs[0].placement = first.placement(common::id(0)).cloned();
    snap.jobs.push(trial(1, 9, 0.55, false, 10.0));
    snap.now_s = 10.0;
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &first);
    assert_eq!(running(&plan, &[0, 1]), vec![0], "0.05 ahead: no restart");
    snap.jobs[1].search.as_mut().unwrap().promise = 0.95;
    let plan = build_policy("drover", None)
        .unwrap()
        .schedule(&snap, &first);
    assert_eq!(
        running(&plan, &[0, 1]),
        vec![1],
        "far ahead: it takes the GPU"
    );
}

fn models_text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

struct Frozen;

impl Stopwatch for Frozen {
    fn now_ns(&self) -> u64 {
        0
    }
}

#[test]
fn searches_in_the_simulator_run_every_trial_to_an_answer_under_every_policy() {
    let models = sim::parse_models(&models_text()).unwrap();
    let mut text = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..40u32 {
        let gpus = [1, 2, 4, 1][(i % 4) as usize];
        text.push_str(&format!(
            "{},{},{},vc{}\n",
            i * 300,
            1800 + (i * 7919) % 7200,
            gpus,
            i % 2
        ));
    }
    let trace = sim::parse_trace(&text, &TraceFilter::default()).unwrap();
    let workload = sim::build_workload(&trace, &models, uniform_cluster(1, 8, 64, 32), 3);
    let options = ExperimentOptions {
        count: 2,
        max_trials: 12,
        max_concurrent_trials: 4,
        trial_hours: 1.0,
        ..ExperimentOptions::default()
    };
    for policy in ["drover", "drover-no-search", "tiresias"] {
        let mut searches =
            Experiments::new(options, &workload.tenants, &models, (0.0, 6000.0), 64, 3);
        let (report, _) = sim::run_policy_with(
            policy,
            &workload,
            SimConfig::default(),
            None,
            Some(&mut searches),
            &Frozen,
        )
        .unwrap();
        assert_eq!(report.jobs, 40, "{policy}: the trace's jobs all ran");
        for row in searches.rows() {
            assert_eq!(row.trials, 12, "{policy}: {row:?}");
            assert!(row.finish_s.is_finite(), "{policy}: {row:?}");
            let best_at = row.best_at_s.unwrap_or_else(|| panic!("{policy}: {row:?}"));
            assert!(row.submit_s < best_at && best_at <= row.finish_s);
            assert!(
                row.best.is_some_and(|b| b > 0.0 && b < 1.0),
                "{policy}: {row:?}"
            );
            // 12 trials to 1/27 h, the best third on to 1/9 h and so on: a little over 1 GPU-h of
            // training, more with the restarts and packing of a crowded GPU.
            assert!(
                row.gpu_hours > 0.8 && row.gpu_hours < 5.0,
                "{policy}: {row:?}"
            );
        }
    }
}
