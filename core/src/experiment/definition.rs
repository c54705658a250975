//! The `DroverExperiment` document's definition: the trial template, the search space and its points,
//! the metric and which way is better, the searchers, early stopping and the budgets, with the defaults
//! of what a user may leave out.

use crate::document::ObjectMeta;
use crate::openapi::{PARAMETER_NAME_PATTERN, not_blank};
use crate::schema::one_object;
use crate::spec::JobSpec;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// Parameters a search space may have, at most.
pub const MAX_PARAMETERS: usize = 64;

/// One point of a search space: parameter name → value. Inactive conditional parameters are absent.
pub type Assignment = BTreeMap<String, Value>;

/// A hyper-parameter search, as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DroverExperiment {
    /// Always `drover.dev/v1`.
    #[serde(rename = "apiVersion")]
    #[schema(schema_with = crate::document::api_version)]
    pub api_version: String,
    /// Always `DroverExperiment`.
    #[schema(schema_with = crate::document::experiment_kind)]
    pub kind: String,
    #[schema(schema_with = crate::document::experiment_metadata)]
    pub metadata: ObjectMeta,
    pub spec: ExperimentSpec,
    /// Written by Drover; ignored on submit (any value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// The trial template: a `DroverJob` spec of type `train` or `command`.
    pub trial: JobSpec,
    /// The search space. Each key is a field of the trial spec (`train.optimizer.lr`,
    /// `train.model.hidden`) or, for `command` trials, a hyper-parameter name handed to the program
    /// (`DROVER_HP_<NAME>` and the JSON object in `DROVER_HPARAMS`).
    #[schema(schema_with = parameters_schema)]
    pub parameters: BTreeMap<String, Param>,
    pub metric: MetricGoal,
    pub searcher: SearcherSpec,
    /// Early stopping for searchers without their own (grid, random, TPE).
    #[serde(default)]
    pub early_stopping: EarlyStopping,
    #[serde(default)]
    pub budget: Budget,
    /// Seeds every random choice of the searcher: the same seed and the same results give the same
    /// proposals.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_seed() -> u64 {
    1
}

/// One parameter of the space. `when` makes it conditional: it exists only in trials where another
/// parameter took one of the listed values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Param {
    /// Always this value.
    Const {
        #[schemars(schema_with = "any_value")]
        value: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// An integer in `[min, max]`; `log: true` samples its logarithm uniformly.
    Int {
        min: i64,
        max: i64,
        #[serde(default)]
        log: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// A real number in `[min, max]`; `log: true` samples its logarithm uniformly.
    Double {
        min: f64,
        max: f64,
        #[serde(default)]
        log: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// A real number in `[min, max]` whose logarithm is uniform (`double` with `log: true`).
    LogUniform {
        min: f64,
        max: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// One of these values (numbers, strings, lists: any JSON value).
    Categorical {
        #[schema(min_items = 1, max_items = 256)]
        #[schemars(schema_with = "any_values")]
        values: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
}

impl Param {
    pub fn condition(&self) -> Option<&Condition> {
        match self {
            Param::Const { when, .. }
            | Param::Int { when, .. }
            | Param::Double { when, .. }
            | Param::LogUniform { when, .. }
            | Param::Categorical { when, .. } => when.as_ref(),
        }
    }
}

/// The parameter `param` must have taken one of `one_of`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub param: String,
    #[schema(min_items = 1)]
    #[schemars(schema_with = "any_values")]
    pub one_of: Vec<Value>,
}

/// In a custom resource's schema: any JSON value (a number, a string, a list, a mapping). Kubernetes'
/// structural schemas need a type on every node unless it is left open, as this one is.
fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Any value: a number, a string, a list or a mapping.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// In a custom resource's schema: a list of any JSON values (see [`any_value`]).
fn any_values(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": any_value(generator)
    })
}

/// The metric a trial reports (a metric line's name, e.g. `val_accuracy`) and which way is better.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricGoal {
    #[schema(schema_with = not_blank)]
    pub name: String,
    pub goal: Goal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    Minimize,
    Maximize,
}

impl Goal {
    /// The value turned into a loss: lower is better either way.
    pub fn loss(self, value: f64) -> f64 {
        match self {
            Goal::Minimize => value,
            Goal::Maximize => -value,
        }
    }
}

/// How trials are chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SearcherSpec {
    /// Every combination once; real-valued parameters take `points` evenly spaced values (in log space
    /// for log parameters), integers at most `points` values.
    Grid {
        #[serde(default = "default_grid_points")]
        #[schema(minimum = 2, maximum = 100)]
        points: u32,
    },
    /// Independent uniform draws.
    Random {},
    /// Tree-structured Parzen estimators (Bergstra et al. 2011), multivariate over the parameters
    /// every trial has: the first `startup_trials` are random, then each proposal is the best of
    /// `candidates` draws by the ratio of the good trials' density to the rest's.
    Tpe {
        #[serde(default = "default_startup_trials")]
        #[schema(minimum = 1)]
        startup_trials: u32,
        #[serde(default = "default_candidates")]
        #[schema(minimum = 1, maximum = 10000)]
        candidates: u32,
    },
    /// Asynchronous successive halving (Li et al. 2020): trials start with `min_steps`; the top 1/eta
    /// of each rung resume from their checkpoint for eta times more steps, up to `max_steps`.
    Asha {
        #[schema(minimum = 1)]
        min_steps: u64,
        #[schema(minimum = 2)]
        max_steps: u64,
        #[serde(default = "default_eta")]
        #[schema(minimum = 2, maximum = 100)]
        eta: u32,
    },
    /// Asynchronous Hyperband: ASHA brackets that start trials at every rung, round robin.
    Hyperband {
        #[schema(minimum = 1)]
        min_steps: u64,
        #[schema(minimum = 2)]
        max_steps: u64,
        #[serde(default = "default_eta")]
        #[schema(minimum = 2, maximum = 100)]
        eta: u32,
    },
    /// Population-based training (Jaderberg et al. 2017): `population` trials train `ready_steps` at a
    /// time; a trial in the bottom `quantile` continues from a top-`quantile` trial's checkpoint with its
    /// hyper-parameters perturbed (numbers scaled by one of `perturb`, categories redrawn with
    /// `resample_probability`), until `max_steps`.
    Pbt {
        #[serde(default = "default_population")]
        #[schema(minimum = 2, maximum = 1000)]
        population: u32,
        #[schema(minimum = 1)]
        ready_steps: u64,
        #[schema(minimum = 1)]
        max_steps: u64,
        #[serde(default = "default_quantile")]
        #[schema(exclusive_minimum = 0, maximum = 0.5)]
        quantile: f64,
        #[serde(default = "default_perturb")]
        #[schema(min_items = 1, exclusive_minimum = 0)]
        perturb: Vec<f64>,
        #[serde(default = "default_resample")]
        #[schema(minimum = 0, maximum = 1)]
        resample_probability: f64,
    },
}

fn default_grid_points() -> u32 {
    5
}
fn default_startup_trials() -> u32 {
    10
}
fn default_candidates() -> u32 {
    64
}
fn default_eta() -> u32 {
    3
}
fn default_population() -> u32 {
    8
}
fn default_quantile() -> f64 {
    0.25
}
fn default_perturb() -> Vec<f64> {
    vec![0.8, 1.2]
}
fn default_resample() -> f64 {
    0.25
}

impl SearcherSpec {
    pub fn name(&self) -> &'static str {
        match self {
            SearcherSpec::Grid { .. } => "grid",
            SearcherSpec::Random {} => "random",
            SearcherSpec::Tpe { .. } => "tpe",
            SearcherSpec::Asha { .. } => "asha",
            SearcherSpec::Hyperband { .. } => "hyperband",
            SearcherSpec::Pbt { .. } => "pbt",
        }
    }

    /// Searchers that run trials in segments and resume them from checkpoints; they set each trial's
    /// `train.max_steps` themselves.
    pub fn is_multi_fidelity(&self) -> bool {
        matches!(
            self,
            SearcherSpec::Asha { .. } | SearcherSpec::Hyperband { .. } | SearcherSpec::Pbt { .. }
        )
    }
}

/// Stopping poor trials early, for the searchers that do not decide it themselves.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema, JsonSchema, Default)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EarlyStopping {
    #[default]
    None,
    /// The median rule (Golovin et al. 2017): after `warmup_steps`, stop a trial whose best value is
    /// worse than the median of finished trials' running averages at the same step, once `min_trials`
    /// trials have finished.
    Median {
        #[serde(default)]
        warmup_steps: u64,
        #[serde(default = "default_min_trials")]
        #[schema(minimum = 1)]
        min_trials: u32,
    },
    /// Learning-curve extrapolation: fit a power law to the trial's curve and stop it when its value
    /// predicted at its last step is worse than the best finished trial's, once it has `min_points`
    /// values and `min_trials` trials have finished.
    Curve {
        #[serde(default = "default_min_points")]
        #[schema(minimum = 3)]
        min_points: u32,
        #[serde(default = "default_min_trials")]
        #[schema(minimum = 1)]
        min_trials: u32,
    },
}

/// Read through a copy whose `none` is an empty struct: serde skips other keys beside the tag of a
/// unit variant even under `deny_unknown_fields`, so `{type: none, min_trials: 3}` would pass as if
/// `min_trials` meant something (as `Compression` does).
impl<'de> Deserialize<'de> for EarlyStopping {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
        enum Document {
            None {},
            Median {
                #[serde(default)]
                warmup_steps: u64,
                #[serde(default = "default_min_trials")]
                min_trials: u32,
            },
            Curve {
                #[serde(default = "default_min_points")]
                min_points: u32,
                #[serde(default = "default_min_trials")]
                min_trials: u32,
            },
        }
        Ok(match Document::deserialize(deserializer)? {
            Document::None {} => EarlyStopping::None,
            Document::Median {
                warmup_steps,
                min_trials,
            } => EarlyStopping::Median {
                warmup_steps,
                min_trials,
            },
            Document::Curve {
                min_points,
                min_trials,
            } => EarlyStopping::Curve {
                min_points,
                min_trials,
            },
        })
    }
}

fn default_min_trials() -> u32 {
    5
}
fn default_min_points() -> u32 {
    5
}

/// Limits; the experiment ends when one is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Trials (hyper-parameter configurations) to start. Default: the grid's size for `grid`, 20
    /// otherwise; PBT counts each exploit as a new trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub max_trials: Option<u32>,
    #[serde(default = "default_max_concurrent")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_concurrent_trials: u32,
    /// GPU-hours allocated to the experiment's trials, all of them; reaching it stops running trials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0)]
    pub max_gpu_hours: Option<f64>,
    /// No trial runs past this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub deadline: Option<DateTime<Utc>>,
}

fn default_max_concurrent() -> u32 {
    2
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_trials: None,
            max_concurrent_trials: default_max_concurrent(),
            max_gpu_hours: None,
            deadline: None,
        }
    }
}

/// Default trial budget of a searcher that is not a grid.
pub const DEFAULT_MAX_TRIALS: u32 = 20;

impl DroverExperiment {
    /// `true` when the trials are `command` jobs.
    pub fn is_command(&self) -> bool {
        self.spec.trial.command.is_some()
    }
}

/// `spec.parameters`.
fn parameters_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(128))
                .pattern(Some(PARAMETER_NAME_PATTERN)),
        ))
        .additional_properties(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            "Param",
        ))))
        .min_properties(Some(1))
        .max_properties(Some(MAX_PARAMETERS))
        .description(Some(
            "The search space, 1 to 64 parameters. Each key is a field of the trial spec \
             (`train.optimizer.lr`, `train.model.hidden`) or, for `command` trials, a \
             hyper-parameter name handed to the program (`DROVER_HP_<NAME>` and the JSON object in \
             `DROVER_HPARAMS`). A `when` names another parameter of the space, without cycles.",
        ))
        .into()
}
