//! The `DroverJob` document (DESIGN.md, "Contracts"): one shape for REST, the CLI and Kubernetes.
//!
//! Parsing is strict: unknown fields and wrong types are errors that name the field. Everything a user
//! may leave out has the default the design gives. Semantic checks (ranges, combinations) live in
//! [`crate::validate`]; [`DroverJob::parse`] runs both.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The `apiVersion` this build understands.
pub const API_VERSION: &str = "drover.dev/v1";
/// The `kind` of a job document.
pub const KIND: &str = "DroverJob";
/// Version of the stored document's schema, kept beside it so later versions can upgrade old rows.
pub const SPEC_SCHEMA_VERSION: i32 = 1;

/// A problem with a submitted document: the field (dotted path, as in the document) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SpecError {
    pub field: String,
    pub reason: String,
    /// The bytes are not JSON/YAML at all (as opposed to a well-formed document with a bad value).
    pub malformed: bool,
}

impl SpecError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
            malformed: false,
        }
    }

    fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            malformed: true,
            ..Self::new(field, reason)
        }
    }
}

/// The format of a submitted document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

/// A training job or a command job, as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DroverJob {
    /// Always `drover.dev/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `DroverJob`.
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: JobSpec,
    /// Written by Drover; ignored on submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub status: Option<serde_json::Value>,
}

/// Name and labels. `namespace` and `annotations` are accepted so a file written for `kubectl apply`
/// can be submitted unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectMeta {
    /// A DNS-1123 label, unique within the tenant. May be left out when `generateName` is given.
    #[serde(default)]
    pub name: String,
    /// A prefix the server completes to a unique name (five random characters appended), as
    /// Kubernetes does, for a job submitted again and again from one file. `name`, if given, wins.
    #[serde(
        rename = "generateName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub generate_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    /// Drover's training engine.
    Train,
    /// An arbitrary process.
    Command,
}

impl JobType {
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Train => "train",
            JobType::Command => "command",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    #[serde(rename = "type")]
    pub job_type: JobType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<TrainSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSpec>,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub distributed: Distributed,
    #[serde(default)]
    pub scheduling: Scheduling,
    #[serde(default)]
    pub checkpoint: CheckpointPolicy,
    #[serde(default = "defaults::max_restarts")]
    pub max_restarts: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    pub model: ModelSpec,
    pub dataset: DatasetSpec,
    #[serde(default)]
    pub optimizer: OptimizerSpec,
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Clip the global gradient norm to this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_clip_norm: Option<f64>,
    /// The GLOBAL batch, split across workers and unchanged by resizes.
    pub batch_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(default = "defaults::eval_every")]
    pub eval_every: u64,
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<InitFrom>,
}

/// The model and its size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelSpec {
    /// A multi-layer perceptron.
    Mlp {
        #[serde(default = "defaults::mlp_hidden")]
        hidden: Vec<u32>,
        #[serde(default)]
        dropout: f64,
    },
    /// A LeNet-5 class convolutional network; its input size comes from the dataset.
    Cnn {
        #[serde(default = "defaults::cnn_channels")]
        channels: Vec<u32>,
        #[serde(default = "defaults::cnn_hidden")]
        hidden: Vec<u32>,
        #[serde(default)]
        dropout: f64,
    },
    /// A character-level transformer language model.
    Charlm {
        #[serde(default = "defaults::charlm_layers")]
        layers: u32,
        #[serde(default = "defaults::charlm_heads")]
        heads: u32,
        #[serde(default = "defaults::charlm_d_model")]
        d_model: u32,
        #[serde(default = "defaults::charlm_context")]
        context: u32,
        #[serde(default)]
        dropout: f64,
    },
}

/// Where the training data comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum DatasetSpec {
    /// The UCI handwritten digits shipped with Drover.
    Digits {},
    /// A directory in IDX format (the MNIST family).
    Idx { path: String },
    /// A CSV file of numeric features and a label column.
    Csv {
        path: String,
        /// The label column's name; the last column when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_column: Option<String>,
    },
    /// Plain text, for language models.
    Text { path: String },
    /// Generated data, for tests and demos.
    Synthetic {
        #[serde(default = "defaults::synthetic_samples")]
        samples: u64,
        #[serde(default = "defaults::synthetic_features")]
        features: u32,
        #[serde(default = "defaults::synthetic_classes")]
        classes: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum OptimizerSpec {
    Sgd {
        lr: f64,
        #[serde(default)]
        momentum: f64,
        #[serde(default)]
        nesterov: bool,
        #[serde(default)]
        weight_decay: f64,
    },
    Adamw {
        #[serde(default = "defaults::adamw_lr")]
        lr: f64,
        #[serde(default = "defaults::adamw_weight_decay")]
        weight_decay: f64,
        #[serde(default = "defaults::beta1")]
        beta1: f64,
        #[serde(default = "defaults::beta2")]
        beta2: f64,
        #[serde(default = "defaults::eps")]
        eps: f64,
    },
}

impl Default for OptimizerSpec {
    fn default() -> Self {
        OptimizerSpec::Adamw {
            lr: defaults::adamw_lr(),
            weight_decay: defaults::adamw_weight_decay(),
            beta1: defaults::beta1(),
            beta2: defaults::beta2(),
            eps: defaults::eps(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default)]
    pub decay: Decay,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    #[default]
    None,
    Cosine,
}

/// Stop when a metric reaches a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub metric: String,
    pub value: f64,
    #[serde(default)]
    pub mode: TargetMode,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TargetMode {
    #[default]
    Max,
    Min,
}

/// Start from another job's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitFrom {
    pub checkpoint: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    pub argv: Vec<String>,
    /// Environment variables: a value, or `{secret: NAME}` for one of the tenant's secrets (the value
    /// reaches only the task's process; the job document keeps the reference).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    #[serde(default = "defaults::workdir")]
    pub workdir: String,
}

/// One environment variable's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EnvValue {
    /// Stored and shown as it is: not for secrets.
    Plain(String),
    /// One of the tenant's secrets, by name.
    Secret(SecretRef),
}

/// A reference to a secret of the job's tenant (`drover secret set NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub secret: String,
}

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = EnvValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, or {secret: NAME} for one of the tenant's secrets")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<EnvValue, E> {
                Ok(EnvValue::Plain(value.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, value: String) -> Result<EnvValue, E> {
                Ok(EnvValue::Plain(value))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<EnvValue, A::Error> {
                SecretRef::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(EnvValue::Secret)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl EnvValue {
    /// The secret this value refers to, if any.
    pub fn secret(&self) -> Option<&str> {
        match self {
            EnvValue::Plain(_) => None,
            EnvValue::Secret(reference) => Some(&reference.secret),
        }
    }
}

impl CommandSpec {
    /// The names of the secrets the job's environment refers to.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.env.values().filter_map(EnvValue::secret)
    }
}

/// An inclusive range of task counts; `min < max` makes the job elastic. A document may give a plain
/// count (`workers: 2`) for `{min: 2, max: 2}`, as `drover resize --workers 2` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskRange {
    pub min: u32,
    pub max: u32,
}

impl<'de> Deserialize<'de> for TaskRange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, Unexpected};

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            min: u32,
            max: u32,
        }

        struct Range;

        impl<'de> de::Visitor<'de> for Range {
            type Value = TaskRange;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a task count (`2`) or a range (`{min: 1, max: 4}`)")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TaskRange, E> {
                let n = u32::try_from(v)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))?;
                Ok(TaskRange { min: n, max: n })
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TaskRange, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
                }
            }

            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<TaskRange, A::Error> {
                let Fields { min, max } =
                    Fields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TaskRange { min, max })
            }
        }

        deserializer.deserialize_any(Range)
    }
}

/// In a custom resource's schema, an internally tagged enum (`{type: mlp, hidden: [...]}`) is one object:
/// `type` lists every variant and the other fields are the union of the variants' fields. Kubernetes'
/// structural schemas cannot say "these fields only with that type"; the API's validation does. A field
/// two variants type differently is a `number` where both are numbers (`int` and `double` bounds),
/// else left open.
pub(crate) fn one_object(schema: &mut schemars::Schema) {
    use serde_json::Value;
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Array(variants)) = object.remove("oneOf") else {
        return;
    };
    let mut tags = Vec::new();
    let mut fields = serde_json::Map::new();
    for variant in &variants {
        let Some(properties) = variant.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (name, field) in properties {
            if name == "type" {
                match (field.get("const"), field.get("enum")) {
                    (Some(tag), _) => tags.push(tag.clone()),
                    (None, Some(Value::Array(more))) => tags.extend(more.iter().cloned()),
                    _ => {}
                }
            } else if let Some(existing) = fields.get_mut(name) {
                union_field(existing, field);
            } else {
                fields.insert(name.clone(), field.clone());
            }
        }
    }
    fields.insert(
        "type".to_owned(),
        serde_json::json!({"type": "string", "enum": tags}),
    );
    object.insert("type".to_owned(), "object".into());
    object.insert("properties".to_owned(), Value::Object(fields));
    object.insert("required".to_owned(), serde_json::json!(["type"]));
}

/// A field of one variant of [`one_object`]'s enum merged with the same field of another; the first
/// one's description stays.
fn union_field(existing: &mut serde_json::Value, other: &serde_json::Value) {
    use serde_json::Value;
    let shape = |field: &Value| {
        let mut field = field.clone();
        if let Some(map) = field.as_object_mut() {
            map.remove("description");
            map.remove("default");
        }
        field
    };
    if shape(existing) == shape(other) {
        return;
    }
    let numeric = |field: &Value| {
        matches!(
            field.get("type").and_then(Value::as_str),
            Some("integer" | "number")
        )
    };
    let description = existing.get("description").cloned();
    let mut merged = if numeric(existing) && numeric(other) {
        serde_json::json!({"type": "number"})
    } else {
        serde_json::json!({"x-kubernetes-preserve-unknown-fields": true})
    };
    if let (Some(description), Some(map)) = (description, merged.as_object_mut()) {
        map.insert("description".to_owned(), description);
    }
    *existing = merged;
}

/// In a custom resource's schema: a count or a `{min, max}` range. Kubernetes' structural schemas
/// cannot say "an integer or an object", so the field is left open there and checked by the same
/// validation every other interface runs.
impl JsonSchema for TaskRange {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TaskRange".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A task count (`2`) or an inclusive range (`{min: 1, max: 4}`); min < max makes the job elastic.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// In a custom resource's schema: a string, or `{secret: NAME}` (left open, as for [`TaskRange`]).
impl JsonSchema for EnvValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EnvValue".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A value, or `{secret: NAME}` for one of the tenant's secrets.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

impl TaskRange {
    pub fn is_elastic(self) -> bool {
        self.min < self.max
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default = "defaults::workers")]
    pub workers: TaskRange,
    #[serde(default = "defaults::ps")]
    pub ps: TaskRange,
    #[serde(default = "defaults::gpus_per_worker")]
    pub gpus_per_worker: u32,
    /// What one worker needs of a GPU's memory; lets Gandiva pack two jobs on one GPU. Absent: a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_gb: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_types: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default = "defaults::cpus_per_worker")]
    pub cpus_per_worker: u32,
    #[serde(default = "defaults::cpus_per_ps")]
    pub cpus_per_ps: u32,
    #[serde(default = "defaults::memory_gb_per_task")]
    pub memory_gb_per_task: u32,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            workers: defaults::workers(),
            ps: defaults::ps(),
            gpus_per_worker: defaults::gpus_per_worker(),
            gpu_memory_gb: None,
            gpu_types: Vec::new(),
            node_selector: BTreeMap::new(),
            cpus_per_worker: defaults::cpus_per_worker(),
            cpus_per_ps: defaults::cpus_per_ps(),
            memory_gb_per_task: defaults::memory_gb_per_task(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Distributed {
    #[serde(default)]
    pub mode: DistributedMode,
    #[serde(default)]
    pub sync: SyncMode,
    /// SSP's bound: no worker more than this many steps ahead of the slowest.
    #[serde(default = "defaults::staleness")]
    pub staleness: u32,
    #[serde(default)]
    pub compression: Compression,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DistributedMode {
    #[default]
    Ps,
    Allreduce,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    #[default]
    Bsp,
    Ssp,
    Async,
}

/// Gradient compression, each with error feedback.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Compression {
    #[default]
    None,
    /// Keep the largest `ratio` of gradient entries.
    Topk { ratio: f64 },
    /// 1-bit sign with a per-tensor scale.
    Onebit,
    /// QSGD-style stochastic quantisation to `bits` bits.
    Qsgd { bits: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scheduling {
    /// Higher runs first and may preempt lower; -1000 to 1000.
    #[serde(default)]
    pub priority: i32,
    #[serde(default = "defaults::yes")]
    pub preemptible: bool,
}

impl Default for Scheduling {
    fn default() -> Self {
        Scheduling {
            priority: 0,
            preemptible: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPolicy {
    #[serde(default = "defaults::checkpoint_every_steps")]
    pub every_steps: u64,
    #[serde(default = "defaults::keep_last")]
    pub keep_last: u32,
    #[serde(default = "defaults::keep_best")]
    pub keep_best: u32,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            every_steps: defaults::checkpoint_every_steps(),
            keep_last: defaults::keep_last(),
            keep_best: defaults::keep_best(),
        }
    }
}

impl DroverJob {
    /// Parses and validates a document. The error names the first problem found.
    pub fn parse(bytes: &[u8], format: Format) -> Result<DroverJob, SpecError> {
        let job: DroverJob = parse_document(bytes, format).map_err(|err| {
            wrong_kind(bytes, crate::experiment::EXPERIMENT_KIND, KIND).unwrap_or(err)
        })?;
        crate::validate::validate(&job)?;
        Ok(job)
    }

    /// Total GPUs the job asks for at its largest shape.
    pub fn max_gpus(&self) -> u64 {
        u64::from(self.spec.resources.workers.max) * u64::from(self.spec.resources.gpus_per_worker)
    }
}

/// When a document that does not parse says it is of kind `found` (not `expected`), the error says
/// so, rather than naming the first field the other kind does not have.
pub(crate) fn wrong_kind(bytes: &[u8], found: &str, expected: &str) -> Option<SpecError> {
    let text = std::str::from_utf8(bytes).ok()?;
    let says = text.lines().any(|line| {
        let line = line.trim().trim_start_matches('{').trim();
        let rest = line
            .strip_prefix("kind:")
            .or_else(|| line.strip_prefix("\"kind\":"))
            .or_else(|| line.strip_prefix("\"kind\" :"));
        rest.is_some_and(|v| {
            v.trim()
                .trim_matches(|c| c == '"' || c == '\'' || c == ',')
                .trim()
                == found
        })
    }) || text.contains(&format!("\"kind\":\"{found}\""))
        || text.contains(&format!("\"kind\": \"{found}\""));
    says.then(|| {
        let how = if found == crate::experiment::EXPERIMENT_KIND {
            "submit it with `drover experiment submit` (POST /api/v1/experiments)"
        } else {
            "submit it with `drover submit` (POST /api/v1/jobs)"
        };
        SpecError::new(
            "kind",
            format!("this is a {found}, not a {expected}: {how}"),
        )
    })
}

/// Deserialises a document strictly; the error names the field (or says the bytes are not a document).
pub(crate) fn parse_document<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    format: Format,
) -> Result<T, SpecError> {
    match format {
        Format::Json => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
                let malformed = !err.inner().is_data();
                let mut spec_err = path_error(err);
                spec_err.malformed = malformed;
                spec_err
            })?;
            de.end()
                .map_err(|err| SpecError::malformed("(document)", err.to_string()))?;
            Ok(value)
        }
        Format::Yaml => {
            let de = serde_yaml::Deserializer::from_slice(bytes);
            serde_path_to_error::deserialize(de).map_err(|err| {
                // serde_yaml does not classify its errors: anything that is not one of serde's
                // data errors (or ours, from validation) is a syntax error.
                let message = err.inner().to_string();
                let data = [
                    "invalid type",
                    "invalid value",
                    "invalid length",
                    "unknown variant",
                    "unknown field",
                    "missing field",
                    "duplicate field",
                ];
                let malformed = !data.iter().any(|prefix| message.contains(prefix));
                let mut spec_err = path_error(err);
                spec_err.malformed = malformed;
                spec_err
            })
        }
    }
}

fn path_error<E: std::fmt::Display>(err: serde_path_to_error::Error<E>) -> SpecError {
    let path = err.path().to_string();
    // serde_path_to_error writes `?` for a position it could not name (inside a half-parsed value).
    let path = path.trim_end_matches(".?").to_owned();
    let field = if matches!(path.as_str(), "." | "?" | "") {
        "(document)".to_owned()
    } else {
        path
    };
    SpecError::new(field, in_words(&err.inner().to_string()))
}

/// serde's messages name Rust types (`expected u32`, `expected struct TaskRange`): say what is
/// expected in words instead.
fn in_words(message: &str) -> String {
    let mut message = message.to_owned();
    for (rust, words) in [
        ("expected u8", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
    ] {
        if let Some(rest) = message.strip_suffix(rust).map(str::to_owned) {
            message = format!("{rest}{words}");
        } else {
            message = message.replace(&format!("{rust} "), &format!("{words} "));
        }
    }
    if let Some(at) = message.find("expected struct ") {
        message.replace_range(at.., "expected a mapping of its fields");
    }
    message
}

#[path = "spec_defaults.rs"]
mod defaults;
