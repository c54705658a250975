//! One trial of an experiment as a `DroverJob`: the template with the point's values written into
//! the fields its parameters name, plain hyper-parameters handed over in the environment, the
//! segment's step budget and the checkpoint it starts from.

use super::definition::{Assignment, DroverExperiment};
use crate::document::{API_VERSION, KIND, SpecError};
use crate::spec::{DroverJob, InitFrom};
use serde_json::Value;

/// Label every trial job carries: the experiment's name.
pub const EXPERIMENT_LABEL: &str = "drover.dev/experiment";
/// Label every trial job carries: the trial's index within its experiment.
pub const TRIAL_LABEL: &str = "drover.dev/trial";
/// Environment variable holding a `command` trial's hyper-parameters as one JSON object.
pub const HPARAMS_ENV: &str = "DROVER_HPARAMS";
/// Prefix of the per-parameter environment variables of a `command` trial.
pub const HPARAM_ENV_PREFIX: &str = "DROVER_HP_";

/// What one trial segment runs: which point of the space, how far, from which checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRun<'a> {
    pub name: &'a str,
    pub trial: u32,
    pub params: &'a Assignment,
    /// `train.max_steps` (or `command.max_steps`) for multi-fidelity searchers (the total, counted
    /// from step 0).
    pub max_steps: Option<u64>,
    pub init_from: Option<String>,
}

/// `true` when a parameter's name is a path into the trial spec rather than a plain hyper-parameter.
pub fn is_spec_path(name: &str) -> bool {
    let head = name.split('.').next().unwrap_or_default();
    matches!(
        head,
        "train" | "command" | "resources" | "distributed" | "scheduling" | "checkpoint"
    ) && name.contains('.')
        || head == "max_restarts"
}

/// The environment variable a plain hyper-parameter reaches a `command` trial in.
pub fn hparam_env_name(name: &str) -> String {
    let mut env = String::with_capacity(HPARAM_ENV_PREFIX.len() + name.len());
    env.push_str(HPARAM_ENV_PREFIX);
    env.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    env
}

/// The `DroverJob` that runs one trial segment: the template with the point's values written into it,
/// labelled with its experiment and trial, validated like any submitted job. The error names the
/// parameter (`spec.parameters.<name>`) when a value does not fit the field it names.
pub fn build_trial(
    experiment: &DroverExperiment,
    run: &TrialRun<'_>,
) -> Result<DroverJob, SpecError> {
    let mut spec = serde_json::to_value(&experiment.spec.trial)
        .map_err(|err| SpecError::new("spec.trial", err.to_string()))?;
    for (name, value) in run.params {
        if is_spec_path(name) {
            set_path(&mut spec, name, value.clone())
                .map_err(|reason| SpecError::new(format!("spec.parameters.{name}"), reason))?;
        }
    }
    // The segment's budget and starting checkpoint go where the trial's kind keeps them.
    let kind = if spec.get("train").is_some_and(Value::is_object) {
        "train"
    } else {
        "command"
    };
    if let Some(target) = spec.get_mut(kind).and_then(Value::as_object_mut) {
        if let Some(steps) = run.max_steps {
            target.insert("max_steps".into(), Value::from(steps));
        }
        if let Some(checkpoint) = &run.init_from {
            let init = InitFrom {
                checkpoint: checkpoint.clone(),
            };
            let init = serde_json::to_value(init).map_err(|err| {
                SpecError::new(format!("spec.trial.{kind}.init_from"), err.to_string())
            })?;
            target.insert("init_from".into(), init);
        }
    }
    if let Some(command) = spec.get_mut("command").and_then(Value::as_object_mut) {
        let env = command
            .entry("env")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(env) = env.as_object_mut() {
            let all = serde_json::to_string(run.params)
                .map_err(|err| SpecError::new("spec.parameters", err.to_string()))?;
            env.insert(HPARAMS_ENV.into(), Value::String(all));
            for (name, value) in run.params {
                let text = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                env.insert(hparam_env_name(name), Value::String(text));
            }
        }
    }
    let mut labels = experiment.metadata.labels.clone();
    labels.insert(EXPERIMENT_LABEL.into(), experiment.metadata.name.clone());
    labels.insert(TRIAL_LABEL.into(), run.trial.to_string());
    let document = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": run.name, "labels": labels},
        "spec": spec,
    });
    let job: DroverJob = serde_path_to_error::deserialize(&document).map_err(|err| {
        let path = err.path().to_string();
        let path = path.strip_prefix("spec.").unwrap_or(&path);
        let field = parameter_for(path, run.params).unwrap_or_else(|| format!("spec.trial.{path}"));
        SpecError::new(field, err.inner().to_string())
    })?;
    crate::validate::validate(&job).map_err(|err| {
        let field = parameter_for(err.field.trim_start_matches("spec."), run.params)
            .unwrap_or_else(|| err.field.replacen("spec.", "spec.trial.", 1));
        SpecError::new(field, err.reason)
    })?;
    Ok(job)
}

/// The parameter that wrote the field at `path` (relative to the spec), if one did.
fn parameter_for(path: &str, params: &Assignment) -> Option<String> {
    params
        .keys()
        .filter(|name| is_spec_path(name))
        .find(|name| path == name.as_str() || path.starts_with(&format!("{name}.")))
        .map(|name| format!("spec.parameters.{name}"))
}

/// Writes `value` at a dotted path; every object on the way but the last must exist (or be creatable
/// inside an object the template has), so a typo in a path is an error rather than a silent new field.
fn set_path(root: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let mut node = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (depth, part) in parts.iter().enumerate() {
        let last = depth + 1 == parts.len();
        let Some(object) = node.as_object_mut() else {
            return Err(format!(
                "`{}` is not a mapping in the trial spec",
                parts[..depth].join(".")
            ));
        };
        if last {
            object.insert((*part).to_owned(), value);
            return Ok(());
        }
        node = object
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Err("must not be empty".into())
}
