//! The searcher's outlook on running trials, which the scheduler reads: promise and doom.

use drover_core::experiment::{Assignment, DroverExperiment, ExperimentSpec};
use drover_core::spec::Format;
use drover_search::{Segment, SegmentState, TrialRecord, outlook};

fn spec(searcher: &str, extra: &str) -> ExperimentSpec {
    let text = format!(
        r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {{name: outlook-test}}
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
  metric: {{name: val_loss, goal: minimize}}
  searcher: {searcher}
{extra}"#
    );
    DroverExperiment::parse(text.as_bytes(), Format::Yaml)
        .unwrap_or_else(|err| panic!("test spec: {err}"))
        .spec
}

/// A trial whose segments trained to `ends` (the last one `state`), reporting `curve`.
fn trial(index: u32, ends: &[u64], state: SegmentState, curve: &[(u64, f64)]) -> TrialRecord {
    let last = curve.last().map(|&(_, v)| v);
    let segments = ends
        .iter()
        .enumerate()
        .map(|(i, &end)| Segment {
            max_steps: Some(end),
            state: if i + 1 == ends.len() {
                state
            } else {
                SegmentState::Succeeded
            },
            last,
        })
        .collect();
    TrialRecord {
        index,
        params: Assignment::new(),
        source: None,
        replaces: None,
        segments,
        curve: curve.to_vec(),
    }
}

#[test]
fn asha_dooms_a_trial_behind_its_rung_at_the_same_step_and_prefers_promoted_ones() {
    // Rungs 10, 30, 90 (η = 3). Trials 0..2 finished rung 0; trial 0 was promoted and trains towards
    // 30. Trial 4 is at step 5 of rung 0 with loss 2.5, where the others had 1.5, 2.2, 3.5 and 1.2:
    // three of the five are better and only the best ⌊5/3⌋ = 1 is promoted, so it is doomed.
    let s = spec("{type: asha, min_steps: 10, max_steps: 90, eta: 3}", "");
    let trials = vec![
        trial(
            0,
            &[10, 30],
            SegmentState::Active,
            &[(5, 1.5), (10, 1.0), (20, 0.8)],
        ),
        trial(1, &[10], SegmentState::Succeeded, &[(5, 2.2), (10, 2.0)]),
        trial(2, &[10], SegmentState::Succeeded, &[(5, 3.5), (10, 3.0)]),
        trial(3, &[10], SegmentState::Active, &[(5, 1.2)]),
        trial(4, &[10], SegmentState::Active, &[(5, 2.5)]),
    ];
    let outlook = outlook(&s, &trials);
    assert_eq!(outlook.len(), 3, "only active trials: {outlook:?}");
    assert!(outlook[&4].doomed, "{:?}", outlook[&4]);
    // Trial 3 leads its rung at step 5: promotable, not doomed.
    assert!(!outlook[&3].doomed, "{:?}", outlook[&3]);
    // Trial 0 trains towards rung 1 where nobody else is: not doomed, and the most promising.
    assert!(!outlook[&0].doomed);
    assert!(outlook[&0].promise > outlook[&3].promise);
    assert!(outlook[&3].promise > outlook[&4].promise);
}

#[test]
fn asha_dooms_nobody_before_eta_trials_reached_the_step() {
    let s = spec("{type: asha, min_steps: 10, max_steps: 90, eta: 3}", "");
    let trials = vec![
        trial(0, &[10], SegmentState::Succeeded, &[(10, 1.0)]),
        trial(1, &[10], SegmentState::Active, &[(10, 5.0)]),
    ];
    assert!(!outlook(&s, &trials)[&1].doomed);
}

#[test]
fn median_rule_dooms_a_trial_inside_its_warmup_that_it_will_stop_after() {
    let s = spec(
        "{type: random}",
        "  early_stopping: {type: median, warmup_steps: 50, min_trials: 2}\n",
    );
    let trials = vec![
        trial(0, &[100], SegmentState::Succeeded, &[(10, 1.0), (100, 0.5)]),
        trial(1, &[100], SegmentState::Succeeded, &[(10, 1.2), (100, 0.6)]),
        trial(2, &[100], SegmentState::Active, &[(10, 3.0)]),
        trial(3, &[100], SegmentState::Active, &[(10, 0.9)]),
    ];
    let outlook = outlook(&s, &trials);
    assert!(outlook[&2].doomed);
    assert!(!outlook[&3].doomed);
    assert!(outlook[&3].promise > outlook[&2].promise);
    // Without early stopping nothing is doomed: the searcher would let it run.
    let none = spec("{type: random}", "");
    assert!(
        drover_search::outlook(&none, &trials)
            .values()
            .all(|o| !o.doomed)
    );
}

#[test]
fn pbt_dooms_the_bottom_quantile_of_the_population() {
    let s = spec(
        "{type: pbt, population: 4, ready_steps: 10, max_steps: 40, quantile: 0.25}",
        "",
    );
    let trials = vec![
        trial(0, &[10, 20], SegmentState::Active, &[(10, 1.0)]),
        trial(1, &[10, 20], SegmentState::Active, &[(10, 2.0)]),
        trial(2, &[10, 20], SegmentState::Active, &[(10, 3.0)]),
        trial(3, &[10, 20], SegmentState::Active, &[(10, 4.0)]),
    ];
    let outlook = outlook(&s, &trials);
    let doomed: Vec<u32> = outlook
        .iter()
        .filter(|(_, o)| o.doomed)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(doomed, vec![3]);
    assert!(outlook[&0].promise > outlook[&1].promise);
}
