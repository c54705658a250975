//! The searchers' contracts: deterministic per seed, the grid covered once, ASHA's promotions,
//! PBT's exploit, early stopping and the budgets.

use drover_core::experiment::{Assignment, DroverExperiment, ExperimentSpec};
use drover_core::spec::Format;
use drover_search::{
    Decision, Segment, SegmentState, Situation, Source, TrialRecord, apply, offline, plan,
};
use std::collections::BTreeSet;

fn spec(searcher: &str, extra: &str) -> ExperimentSpec {
    let text = format!(
        r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {{name: search-test}}
spec:
  trial:
    type: train
    train:
      model: {{type: mlp, hidden: [16]}}
      dataset: {{type: digits}}
      optimizer: {{type: adamw, lr: 0.001}}
      batch_size: 32
      max_steps: 100
  parameters:
    train.optimizer.lr: {{type: log_uniform, min: 0.0001, max: 0.1}}
    train.batch_size: {{type: int, min: 16, max: 64}}
    train.model.hidden: {{type: categorical, values: [[16], [32], [64]]}}
  metric: {{name: val_loss, goal: minimize}}
  searcher: {searcher}
{extra}"#
    );
    DroverExperiment::parse(text.as_bytes(), Format::Yaml)
        .unwrap_or_else(|err| panic!("test spec: {err}"))
        .spec
}

/// A smooth function of the point: best near lr = 0.01, batch 32, width 64; improves with steps.
fn objective(params: &Assignment, steps: Option<u64>) -> f64 {
    let lr = params["train.optimizer.lr"].as_f64().unwrap_or(1.0);
    let batch = params["train.batch_size"].as_f64().unwrap_or(0.0);
    let width = params["train.model.hidden"][0].as_f64().unwrap_or(0.0);
    let base = (lr.log10() + 2.0).powi(2) + ((batch - 32.0) / 32.0).powi(2) + (64.0 - width) / 64.0;
    base + 10.0 / steps.unwrap_or(1000).max(1) as f64
}

fn points(trials: &[TrialRecord]) -> Vec<Assignment> {
    trials.iter().map(|t| t.params.clone()).collect()
}

#[test]
fn every_searcher_proposes_the_same_trials_for_the_same_seed_and_others_for_another() {
    let searchers = [
        ("{type: random}", ""),
        ("{type: tpe, startup_trials: 4}", ""),
        ("{type: asha, min_steps: 10, max_steps: 90}", ""),
        ("{type: hyperband, min_steps: 10, max_steps: 90}", ""),
        (
            "{type: pbt, population: 4, ready_steps: 10, max_steps: 40}",
            "",
        ),
    ];
    for (searcher, extra) in searchers {
        let budget = "  budget: {max_trials: 12, max_concurrent_trials: 3}\n";
        let one = spec(searcher, &format!("{extra}{budget}  seed: 7\n"));
        let again = offline::run(&one, objective);
        let first = offline::run(&one, objective);
        assert_eq!(first, again, "{searcher}: same seed, same trials");
        assert!(first.len() >= 4, "{searcher}: ran {} trials", first.len());
        let other = spec(searcher, &format!("{extra}{budget}  seed: 8\n"));
        assert_ne!(
            points(&first),
            points(&offline::run(&other, objective)),
            "{searcher}: another seed, other trials"
        );
    }
}

#[test]
fn the_grid_covers_every_point_exactly_once_conditions_included() {
    let text = r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: grid}
spec:
  trial: {type: command, command: {argv: [true]}}
  parameters:
    optimizer: {type: categorical, values: [sgd, adam]}
    momentum: {type: double, min: 0.5, max: 0.9, when: {param: optimizer, one_of: [sgd]}}
    layers: {type: int, min: 1, max: 3}
    lr: {type: log_uniform, min: 0.001, max: 0.1}
  metric: {name: loss, goal: minimize}
  searcher: {type: grid, points: 3}
  budget: {max_concurrent_trials: 4}
"#;
    let spec = DroverExperiment::parse(text.as_bytes(), Format::Yaml)
        .expect("valid")
        .spec;
    let trials = offline::run(&spec, |_, _| 1.0);
    // sgd: 3 momenta x 3 layers x 3 lr = 27; adam: 3 layers x 3 lr = 9.
    assert_eq!(trials.len(), 36);
    let distinct: BTreeSet<String> = trials
        .iter()
        .map(|t| serde_json::to_string(&t.params).expect("json"))
        .collect();
    assert_eq!(distinct.len(), 36, "no point twice");
    assert!(
        trials
            .iter()
            .all(|t| t.params.contains_key("momentum") == (t.params["optimizer"] == "sgd")),
        "momentum exactly where the optimizer is sgd"
    );
    let lrs: BTreeSet<String> = trials.iter().map(|t| t.params["lr"].to_string()).collect();
    assert_eq!(lrs.len(), 3);
}

#[test]
fn asha_promotes_exactly_the_top_third_of_each_rung_and_resumes_them() {
    let spec = spec(
        "{type: asha, min_steps: 10, max_steps: 90, eta: 3}",
        "  budget: {max_trials: 9, max_concurrent_trials: 9}\n",
    );
    // All nine trials start at once; finish them with known values.
    let mut situation = Situation::default();
    let first = plan(&spec, &situation);
    assert_eq!(first.decisions.len(), 9);
    for decision in &first.decisions {
        assert!(
            matches!(
                decision,
                Decision::Start {
                    max_steps: Some(10),
                    source: None,
                    ..
                }
            ),
            "{decision:?}"
        );
        apply(&mut situation.trials, decision);
    }
    let losses = [5.0, 3.0, 8.0, 1.0, 9.0, 2.0, 7.0, 6.0, 4.0];
    for (trial, loss) in situation.trials.iter_mut().zip(losses) {
        finish(trial, loss);
    }
    let second = plan(&spec, &situation);
    let promoted: BTreeSet<u32> = second
        .decisions
        .iter()
        .map(|d| match d {
            Decision::Resume {
                trial,
                segment: 1,
                max_steps: 30,
            } => *trial,
            other => panic!("only promotions to rung 1 are due: {other:?}"),
        })
        .collect();
    assert_eq!(
        promoted,
        BTreeSet::from([3, 5, 1]),
        "the best three of nine"
    );
    for decision in &second.decisions {
        apply(&mut situation.trials, decision);
    }
    for index in [3usize, 5, 1] {
        let loss = [0.0, 0.5, 0.0, 0.9, 0.0, 0.2][index];
        finish(&mut situation.trials[index], loss);
    }
    let third = plan(&spec, &situation);
    assert_eq!(
        third.decisions,
        vec![Decision::Resume {
            trial: 5,
            segment: 2,
            max_steps: 90
        }],
        "the best one of rung 1's three goes on to the top rung"
    );
    apply(&mut situation.trials, &third.decisions[0]);
    finish(&mut situation.trials[5], 0.1);
    let last = plan(&spec, &situation);
    assert!(last.decisions.is_empty());
    assert!(last.finished.is_some(), "nothing left to promote or start");
}

/// The promotions ASHA makes depend on the trials' results only, not on the order they came in: the
/// same nine results at the bottom rung, arriving in two different orders (each arrival followed by a
/// decision, as the experiment driver makes one whenever a job ends), promote the same trials. With
/// promotion by whoever was best when a slot freed, the early finishers of one order were promoted
/// and those of the other were not (an end-to-end run under load reached rung 1 with four trials in
/// one run and three in another).
#[test]
fn asha_promotes_the_same_trials_whatever_order_their_results_arrive_in() {
    let spec = spec(
        "{type: asha, min_steps: 10, max_steps: 90, eta: 3}",
        "  budget: {max_trials: 9, max_concurrent_trials: 9}\n",
    );
    // Lower is better (val_loss, minimised).
    let losses = [0.11, 0.69, 0.40, 0.62, 0.90, 0.47, 0.86, 0.27, 0.12];
    let promoted_in = |order: &[usize]| -> BTreeSet<u32> {
        let mut situation = Situation::default();
        for decision in plan(&spec, &situation).decisions {
            apply(&mut situation.trials, &decision);
        }
        let mut promoted = BTreeSet::new();
        for &index in order {
            finish(&mut situation.trials[index], losses[index]);
            for decision in plan(&spec, &situation).decisions {
                if let Decision::Resume {
                    trial, segment: 1, ..
                } = decision
                {
                    promoted.insert(trial);
                }
                apply(&mut situation.trials, &decision);
            }
        }
        promoted
    };
    let by_index = promoted_in(&[0, 1, 2, 3, 4, 5, 6, 7, 8]);
    let shuffled = promoted_in(&[7, 8, 0, 2, 5, 1, 3, 6, 4]);
    let reversed = promoted_in(&[8, 7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(by_index, shuffled);
    assert_eq!(by_index, reversed);
    // In trial order: after 3 results the best (0); after 6 the best two (0, 2); after 8 (0, 7);
    // after 9 (0, 8, 7): ASHA's asynchronous promotions, made in a fixed order.
    assert_eq!(by_index, BTreeSet::from([0, 2, 7, 8]));
}

fn finish(trial: &mut TrialRecord, value: f64) {
    let segment = trial.segments.last_mut().expect("a segment");
    segment.state = SegmentState::Succeeded;
    segment.last = Some(value);
    trial.curve.push((segment.max_steps.unwrap_or(1), value));
}

#[test]
fn hyperband_starts_trials_in_every_bracket() {
    let spec = spec(
        "{type: hyperband, min_steps: 10, max_steps: 90, eta: 3}",
        "  budget: {max_trials: 6, max_concurrent_trials: 6}\n",
    );
    let first = plan(&spec, &Situation::default());
    let starts: Vec<Option<u64>> = first
        .decisions
        .iter()
        .map(|d| match d {
            Decision::Start { max_steps, .. } => *max_steps,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(starts, [10, 30, 90, 10, 30, 90].map(Some));
}

#[test]
fn pbt_replaces_the_worst_member_from_a_top_members_checkpoint() {
    let spec = spec(
        "{type: pbt, population: 4, ready_steps: 10, max_steps: 30, quantile: 0.25}",
        "  budget: {max_trials: 20, max_concurrent_trials: 4}\n",
    );
    let mut situation = Situation::default();
    for decision in plan(&spec, &situation).decisions {
        apply(&mut situation.trials, &decision);
    }
    assert_eq!(situation.trials.len(), 4);
    // Member 2 is the worst, member 1 the best; member 2 finishes its round last.
    for (index, loss) in [(0usize, 2.0), (1, 1.0), (3, 3.0), (2, 9.0)] {
        finish(&mut situation.trials[index], loss);
    }
    let planned = plan(&spec, &situation);
    let exploit = planned
        .decisions
        .iter()
        .find(|d| matches!(d, Decision::Start { .. }))
        .expect("the worst member is replaced");
    let Decision::Start {
        trial,
        params,
        max_steps,
        source,
        replaces,
    } = exploit
    else {
        unreachable!()
    };
    assert_eq!(*trial, 4);
    assert_eq!(*replaces, Some(2));
    assert_eq!(
        *source,
        Some(Source {
            trial: 1,
            segment: 0
        }),
        "from the best member's checkpoint after its first round"
    );
    assert_eq!(
        *max_steps,
        Some(20),
        "one more round from the source's step 10"
    );
    let source_lr = situation.trials[1].params["train.optimizer.lr"]
        .as_f64()
        .expect("lr");
    let lr = params["train.optimizer.lr"].as_f64().expect("lr");
    assert!(
        (lr / source_lr - 0.8).abs() < 1e-9
            || (lr / source_lr - 1.2).abs() < 1e-9
            || lr == 0.1
            || lr == 0.0001,
        "lr perturbed from {source_lr} to {lr}"
    );
    // The others continue from their own checkpoints.
    let resumed: BTreeSet<u32> = planned
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Resume {
                trial,
                max_steps: 20,
                segment: 1,
            } => Some(*trial),
            _ => None,
        })
        .collect();
    assert_eq!(resumed, BTreeSet::from([0, 1, 3]));
    // Run to the end: every member reaches max_steps and the experiment finishes.
    let trials = offline::run(&spec, objective);
    let members = drover_search::pbt::members(&trials);
    assert_eq!(members.len(), 4);
    assert!(
        members
            .iter()
            .all(|m| drover_search::pbt::steps_done(m) == 30)
    );
}

#[test]
fn the_median_rule_stops_a_trial_worse_than_finished_ones() {
    let spec = spec(
        "{type: random}",
        "  early_stopping: {type: median, min_trials: 3}\n  budget: {max_trials: 10, max_concurrent_trials: 1}\n",
    );
    let mut trials = Vec::new();
    for index in 0..3u32 {
        trials.push(TrialRecord {
            index,
            params: Assignment::new(),
            source: None,
            replaces: None,
            segments: vec![Segment {
                max_steps: None,
                state: SegmentState::Succeeded,
                last: Some(1.0),
            }],
            curve: vec![(10, 2.0), (20, 1.5), (30, 1.0)],
        });
    }
    let running = |index: u32, curve: Vec<(u64, f64)>| TrialRecord {
        index,
        params: Assignment::new(),
        source: None,
        replaces: None,
        segments: vec![Segment {
            max_steps: None,
            state: SegmentState::Active,
            last: None,
        }],
        curve,
    };
    trials.push(running(3, vec![(10, 4.0), (20, 3.5)]));
    trials.push(running(4, vec![(10, 1.9), (20, 1.2)]));
    let situation = Situation {
        trials,
        ..Situation::default()
    };
    let planned = plan(&spec, &situation);
    let stopped: Vec<u32> = planned
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Stop { trial, .. } => Some(*trial),
            _ => None,
        })
        .collect();
    assert_eq!(stopped, [3], "only the trial above the median is stopped");
}

#[test]
fn budgets_end_the_experiment() {
    let spec = spec(
        "{type: random}",
        "  budget: {max_trials: 5, max_concurrent_trials: 2, max_gpu_hours: 3}\n",
    );
    assert_eq!(offline::run(&spec, objective).len(), 5, "max_trials");
    let mut situation = Situation::default();
    for decision in plan(&spec, &situation).decisions {
        apply(&mut situation.trials, &decision);
    }
    situation.gpu_hours_used = 3.5;
    let over = plan(&spec, &situation);
    assert_eq!(over.decisions.len(), 2, "both running trials stop");
    assert!(
        over.decisions
            .iter()
            .all(|d| matches!(d, Decision::Stop { .. }))
    );
    assert!(
        over.finished
            .as_deref()
            .is_some_and(|why| why.contains("GPU-hour"))
    );
    situation.gpu_hours_used = 0.0;
    situation.past_deadline = true;
    let late = plan(&spec, &situation);
    assert!(
        late.finished
            .as_deref()
            .is_some_and(|why| why.contains("deadline"))
    );
}

#[test]
fn tpe_finds_better_points_than_random_search() {
    let mut tpe_total = 0.0;
    let mut random_total = 0.0;
    for seed in 0..5 {
        let budget =
            format!("  budget: {{max_trials: 40, max_concurrent_trials: 1}}\n  seed: {seed}\n");
        let tpe = spec("{type: tpe}", &budget);
        let random = spec("{type: random}", &budget);
        tpe_total +=
            offline::best_of_first(&tpe, &offline::run(&tpe, objective), 40).expect("a value");
        random_total += offline::best_of_first(&random, &offline::run(&random, objective), 40)
            .expect("a value");
    }
    assert!(
        tpe_total < random_total,
        "tpe {tpe_total} vs random {random_total}"
    );
}
