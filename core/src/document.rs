//! What Drover's two documents, `DroverJob` ([`crate::spec`]) and `DroverExperiment`
//! ([`crate::experiment`]), share: the `apiVersion` this build understands, their kinds, their
//! metadata, the formats they are submitted in, and the error that names a field.

use crate::openapi::{LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, one_string};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AllOfBuilder, AnyOfBuilder, ObjectBuilder, Schema, Type};

/// The `apiVersion` this build understands.
pub const API_VERSION: &str = "drover.dev/v1";
/// The `kind` of a job document.
pub const KIND: &str = "DroverJob";
/// The `kind` of an experiment document.
pub const EXPERIMENT_KIND: &str = "DroverExperiment";
/// The largest document (a job or an experiment) accepted, in bytes as stored: its JSON with every
/// YAML alias expanded. A task's definition is sent to its executor in one message, so a 60 KB body
/// whose aliases grew to megabytes could be stored and then never be delivered.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// Labels a document may carry, at most.
pub const MAX_LABELS: usize = 64;
/// The longest `generateName`: the five characters appended keep the name within 63.
pub const MAX_NAME_PREFIX: usize = 58;
/// Longest experiment name: its trials are named `<name>-t<trial>-<segment>` within 63 characters.
pub const MAX_EXPERIMENT_NAME: usize = 45;

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

    pub(crate) fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Self {
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

/// Name and labels. `namespace` and `annotations` are accepted so a file written for `kubectl apply`
/// can be submitted unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectMeta {
    /// A DNS-1123 label, unique within the tenant. May be left out when `generateName` is given. An
    /// experiment's is required and at most 45 characters (its trials' names add a suffix).
    #[serde(default)]
    #[schema(max_length = 63, pattern = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")]
    pub name: String,
    /// A prefix the server completes to a unique name (five random characters appended), as
    /// Kubernetes does, for a job submitted again and again from one file. `name`, if given, wins;
    /// without one, this must be 1 to 58 lowercase letters, digits and `-`, starting with a letter
    /// or digit.
    #[serde(
        rename = "generateName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub generate_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(schema_with = labels_schema)]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `apiVersion`.
pub(crate) fn api_version() -> Schema {
    one_string(API_VERSION, "Always `drover.dev/v1`.")
}

/// A job's `kind`.
pub(crate) fn job_kind() -> Schema {
    one_string(KIND, "Always `DroverJob`.")
}

/// An experiment's `kind`.
pub(crate) fn experiment_kind() -> Schema {
    one_string(EXPERIMENT_KIND, "Always `DroverExperiment`.")
}

/// A job's `metadata`: a `name`, or else a `generateName` the server completes to one.
pub(crate) fn job_metadata() -> Schema {
    let named = ObjectBuilder::new()
        .property(
            "name",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1)),
        )
        .required("name");
    let generated = ObjectBuilder::new()
        .property(
            "generateName",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(MAX_NAME_PREFIX))
                .pattern(Some("^[a-z0-9][-a-z0-9]*$")),
        )
        .required("generateName");
    AllOfBuilder::new()
        .item(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("ObjectMeta")))
        .item(AnyOfBuilder::new().item(named).item(generated))
        .description(Some(
            "A `name`, or else a `generateName` (1 to 58 lowercase letters, digits and `-`, starting \
             with a letter or digit) the server completes to a fresh name.",
        ))
        .into()
}

/// An experiment's `metadata`: a `name` of at most 45 characters (its trials' names add a suffix).
pub(crate) fn experiment_metadata() -> Schema {
    AllOfBuilder::new()
        .item(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            "ObjectMeta",
        )))
        .item(
            ObjectBuilder::new()
                .property(
                    "name",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(MAX_EXPERIMENT_NAME)),
                )
                .required("name"),
        )
        .description(Some(
            "A `name` of at most 45 characters: its trials are named `<name>-t<trial>-<segment>`.",
        ))
        .into()
}

/// `metadata.labels`.
fn labels_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(317))
                .pattern(Some(LABEL_KEY_PATTERN)),
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(63))
                .pattern(Some(LABEL_VALUE_PATTERN)),
        ))
        .max_properties(Some(MAX_LABELS))
        .description(Some(
            "At most 64 labels. A key is a name (1 to 63 letters, digits, `-`, `_` and `.`, starting \
             and ending with a letter or digit), optionally after a DNS prefix and `/` \
             (`team.example.com/owner`), 253 characters at most; a value is empty or such a name.",
        ))
        .into()
}
