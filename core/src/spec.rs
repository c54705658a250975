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
            // Any other error the walk meets, the parse below meets too and names the field.
            if let Err(err) = crate::yaml_budget::within_budget(bytes)
                && crate::yaml_budget::is_over_budget(&err)
            {
                return Err(SpecError::malformed("(document)", err.to_string()));
            }
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
        (
            "expected u8",
            "expected a non-negative integer of at most 255",
        ),
        (
            "expected u16",
            "expected a non-negative integer of at most 65535",
        ),
        (
            "expected u32",
            "expected a non-negative integer of at most 4294967295",
        ),
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

#[path = "spec_command.rs"]
mod command;
#[path = "spec_defaults.rs"]
mod defaults;
#[path = "spec_resources.rs"]
mod resources;
#[path = "spec_train.rs"]
mod train;

pub use command::*;
pub use resources::*;
pub use train::*;
