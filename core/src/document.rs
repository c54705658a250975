//! What Drover's two documents, `DroverJob` ([`crate::spec`]) and `DroverExperiment`
//! ([`crate::experiment`]), share: the `apiVersion` this build understands, their kinds, their
//! metadata, the formats they are submitted in, and the error that names a field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

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
