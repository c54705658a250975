//! Tests of the `DroverExperiment` document: parsing and its checks, the trial jobs built from a
//! point of the space, and the answer to a document of the other kind.

use super::*;
use crate::spec::{DroverJob, EnvValue, Format, OptimizerSpec, SpecError};

const DIGITS: &str = r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: digits-asha}
spec:
  trial:
    type: train
    train:
      model: {type: mlp, hidden: [64]}
      dataset: {type: digits}
      optimizer: {type: adamw, lr: 0.001}
      batch_size: 32
  parameters:
    train.optimizer: {type: categorical, values: [{type: adamw}, {type: sgd, lr: 0.1, momentum: 0.9}]}
    train.optimizer.lr: {type: log_uniform, min: 0.0001, max: 0.3}
    train.model.hidden: {type: categorical, values: [[32], [64], [128]]}
    train.batch_size: {type: int, min: 16, max: 128, log: true}
  metric: {name: val_accuracy, goal: maximize}
  searcher: {type: asha, min_steps: 50, max_steps: 450, eta: 3}
  budget: {max_trials: 9, max_concurrent_trials: 3}
"#;

fn parse(text: &str) -> Result<DroverExperiment, SpecError> {
    DroverExperiment::parse(text.as_bytes(), Format::Yaml)
}

fn error_field(text: &str) -> String {
    parse(text).expect_err("document must be refused").field
}

#[test]
fn a_digits_experiment_parses_and_builds_trials() {
    let experiment = parse(DIGITS).expect("valid");
    assert_eq!(experiment.spec.searcher.name(), "asha");
    let mut params = Assignment::new();
    params.insert(
        "train.optimizer".into(),
        serde_json::json!({"type": "sgd", "lr": 0.1}),
    );
    params.insert("train.optimizer.lr".into(), serde_json::json!(0.02));
    params.insert("train.model.hidden".into(), serde_json::json!([128]));
    params.insert("train.batch_size".into(), serde_json::json!(64));
    let run = TrialRun {
        name: "digits-asha-t3-0",
        trial: 3,
        params: &params,
        max_steps: Some(50),
        init_from: Some("ckpt-1".into()),
    };
    let job = build_trial(&experiment, &run).expect("trial builds");
    let train = job.spec.train.expect("train");
    assert!(matches!(train.optimizer, OptimizerSpec::Sgd { lr, .. } if (lr - 0.02).abs() < 1e-12));
    assert_eq!(train.batch_size, 64);
    assert_eq!(train.max_steps, Some(50));
    assert_eq!(train.init_from.map(|i| i.checkpoint), Some("ckpt-1".into()));
    assert_eq!(job.metadata.labels[EXPERIMENT_LABEL], "digits-asha");
    assert_eq!(job.metadata.labels[TRIAL_LABEL], "3");
}

#[test]
fn a_value_that_does_not_fit_its_field_names_the_parameter() {
    let bad = DIGITS.replace(
        "train.batch_size: {type: int, min: 16, max: 128, log: true}",
        "train.batch_size: {type: int, min: -4, max: 128}",
    );
    assert_eq!(error_field(&bad), "spec.parameters.train.batch_size");
    let bad = DIGITS.replace(
        "[{type: adamw}, {type: sgd, lr: 0.1, momentum: 0.9}]",
        "[{type: adamw}, {type: rmsprop}]",
    );
    assert_eq!(error_field(&bad), "spec.parameters.train.optimizer");
}

#[test]
fn bad_spaces_name_the_field() {
    let cases = [
        (
            "{type: log_uniform, min: 0.0001, max: 0.3}",
            "{type: log_uniform, min: 0, max: 0.3}",
            "spec.parameters.train.optimizer.lr.min",
        ),
        (
            "{type: log_uniform, min: 0.0001, max: 0.3}",
            "{type: double, min: 0.5, max: 0.3}",
            "spec.parameters.train.optimizer.lr.max",
        ),
        (
            "[[32], [64], [128]]",
            "[]",
            "spec.parameters.train.model.hidden.values",
        ),
        (
            "[[32], [64], [128]]",
            "[[32], [32]]",
            "spec.parameters.train.model.hidden.values",
        ),
        (
            "{type: log_uniform, min: 0.0001, max: 0.3}",
            "{type: uniform, min: 0, max: 1}",
            "spec.parameters.train.optimizer.lr.type",
        ),
        ("eta: 3}", "eta: 1}", "spec.searcher.eta"),
        (
            "min_steps: 50, max_steps: 450",
            "min_steps: 450, max_steps: 50",
            "spec.searcher.max_steps",
        ),
        (
            "max_concurrent_trials: 3",
            "max_concurrent_trials: 0",
            "spec.budget.max_concurrent_trials",
        ),
        ("name: val_accuracy", "name: ' '", "spec.metric.name"),
        ("goal: maximize", "goal: up", "spec.metric.goal"),
        (
            "train.batch_size:",
            "batch_size:",
            "spec.parameters.batch_size",
        ),
        ("digits-asha", "Digits_ASHA", "metadata.name"),
    ];
    for (from, to, field) in cases {
        let bad = DIGITS.replacen(from, to, 1);
        assert_ne!(bad, DIGITS, "{from}");
        assert_eq!(error_field(&bad), field, "{from} -> {to}");
    }
}

#[test]
fn conditions_must_name_a_parameter_and_form_no_cycle() {
    let bad = DIGITS.replace(
        "train.batch_size: {type: int, min: 16, max: 128, log: true}",
        "train.batch_size: {type: int, min: 16, max: 128, when: {param: nope, one_of: [1]}}",
    );
    assert_eq!(
        error_field(&bad),
        "spec.parameters.train.batch_size.when.param"
    );
    let bad = DIGITS.replace(
        "train.model.hidden: {type: categorical, values: [[32], [64], [128]]}",
        "train.model.hidden: {type: categorical, values: [[32], [64], [128]], when: {param: train.optimizer, one_of: [{type: lion}]}}",
    );
    assert_eq!(
        error_field(&bad),
        "spec.parameters.train.model.hidden.when.one_of"
    );
}

#[test]
fn command_trials_get_their_parameters_in_the_environment() {
    let text = r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: branin}
spec:
  trial:
    type: command
    command: {argv: [python3, branin.py]}
  parameters:
    x: {type: double, min: -5, max: 10}
    kernel: {type: categorical, values: [rbf, linear]}
  metric: {name: loss, goal: minimize}
  searcher: {type: tpe}
"#;
    let experiment = parse(text).expect("valid");
    let mut params = Assignment::new();
    params.insert("x".into(), serde_json::json!(1.5));
    params.insert("kernel".into(), serde_json::json!("rbf"));
    let run = TrialRun {
        name: "branin-t0-0",
        trial: 0,
        params: &params,
        max_steps: None,
        init_from: None,
    };
    let job = build_trial(&experiment, &run).expect("builds");
    let env = job.spec.command.expect("command").env;
    assert_eq!(env["DROVER_HP_X"], EnvValue::Plain("1.5".into()));
    assert_eq!(env["DROVER_HP_KERNEL"], EnvValue::Plain("rbf".into()));
    assert_eq!(
        env[HPARAMS_ENV],
        EnvValue::Plain(r#"{"kernel":"rbf","x":1.5}"#.into())
    );
    // Under ASHA a segment's budget and starting checkpoint go into the command: the program
    // reads them as DROVER_MAX_STEPS and DROVER_RESUME_FROM (the Python library's ctx.max_steps and
    // ctx.resume_from); the searcher's fields are its own.
    let asha = parse(&text.replace("{type: tpe}", "{type: asha, min_steps: 1, max_steps: 9}"))
        .expect("command trials under ASHA");
    let run = TrialRun {
        max_steps: Some(3),
        init_from: Some("0192a1b2-0000-7000-8000-000000000001".into()),
        ..run
    };
    let command = build_trial(&asha, &run)
        .expect("builds")
        .spec
        .command
        .expect("command");
    assert_eq!(command.max_steps, Some(3));
    assert_eq!(
        command.init_from.expect("init_from").checkpoint,
        "0192a1b2-0000-7000-8000-000000000001"
    );
    let own_budget = text
        .replace("{type: tpe}", "{type: asha, min_steps: 1, max_steps: 9}")
        .replace(
            "    kernel:",
            "    command.max_steps: {type: int, min: 1, max: 9}\n    kernel:",
        );
    assert_eq!(
        error_field(&own_budget),
        "spec.parameters.command.max_steps"
    );
}

#[test]
fn a_document_of_the_other_kind_says_which_command_takes_it() {
    let err = DroverJob::parse(DIGITS.as_bytes(), Format::Yaml).expect_err("not a job");
    assert_eq!(err.field, "kind");
    assert!(
        err.reason.contains("drover experiment submit"),
        "{}",
        err.reason
    );
    let job = include_str!("../../../examples/digits-mlp.yaml");
    let err = parse(job).expect_err("not an experiment");
    assert_eq!(err.field, "kind");
    assert!(err.reason.contains("drover submit"), "{}", err.reason);
    let json = serde_json::to_vec(&serde_json::json!({"apiVersion": "drover.dev/v1", "kind": "DroverJob", "metadata": {"name": "x"}, "spec": {"type": "command"}})).expect("json");
    let err = DroverExperiment::parse(&json, Format::Json).expect_err("not an experiment");
    assert_eq!(err.field, "kind", "{err}");
}

#[test]
fn the_shipped_example_experiments_are_valid() {
    let text = include_str!("../../../examples/experiments/digits-asha.yaml");
    let experiment = parse(text).unwrap_or_else(|err| panic!("digits-asha: {err}"));
    assert_eq!(experiment.metadata.name, "digits-asha");
}

/// ASHA, Hyperband and PBT stop trials by their own rules: a second rule beside them is refused
/// rather than left to fight them; the searchers without one take it.
#[test]
fn early_stopping_is_for_the_searchers_without_their_own() {
    let with_median = DIGITS.replace(
        "  budget:",
        "  early_stopping: {type: median, min_trials: 3}\n  budget:",
    );
    assert_eq!(error_field(&with_median), "spec.early_stopping");
    let hyperband = with_median.replace("type: asha", "type: hyperband");
    assert_eq!(error_field(&hyperband), "spec.early_stopping");
    // A random search's trials run to their own max_steps.
    let random = with_median
        .replace(
            "{type: asha, min_steps: 50, max_steps: 450, eta: 3}",
            "{type: random}",
        )
        .replace("batch_size: 32\n", "batch_size: 32\n      max_steps: 450\n");
    assert!(parse(&random).is_ok(), "{:?}", parse(&random).err());
    let none = DIGITS.replace("  budget:", "  early_stopping: {type: none}\n  budget:");
    assert!(parse(&none).is_ok());
    let none_with_a_setting = DIGITS.replace(
        "  budget:",
        "  early_stopping: {type: none, min_trials: 3}\n  budget:",
    );
    assert!(error_field(&none_with_a_setting).starts_with("spec.early_stopping"));
}
