//! The `command` job's document: its argv and environment, whose values may name a tenant's
//! secret.

use super::defaults;
use crate::openapi::ENV_NAME_PATTERN;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, Type};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    #[schema(schema_with = argv_schema)]
    pub argv: Vec<String>,
    /// Environment variables: a value, or `{secret: NAME}` for one of the tenant's secrets (the value
    /// reaches only the task's process; the job document keeps the reference).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(schema_with = env_schema)]
    pub env: BTreeMap<String, EnvValue>,
    /// The working directory: on the node (relative to the executor's base directory), or, with
    /// `image`, inside the image (relative to its working directory; `.` is the image's own).
    #[serde(default = "defaults::workdir")]
    pub workdir: String,
    /// An OCI image reference (`python:3.12`, `ghcr.io/team/trainer:v3`,
    /// `registry:5000/x@sha256:…`): the command runs in that image — in the task's Pod on
    /// Kubernetes, else in the node's sandbox over the image's root, pulled once per node. Only
    /// nodes that run images receive the job; without it, the command runs over the node's own
    /// system folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 512)]
    pub image: Option<String>,
    /// The step the program stops at: given to it as `DROVER_MAX_STEPS` (the Python library's
    /// `ctx.max_steps`), and the queue's estimate of what is left. ASHA, Hyperband and PBT set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000000000_u64)]
    pub max_steps: Option<u64>,
    /// Before the job has a checkpoint of its own, it starts from this one (`DROVER_RESUME_FROM`):
    /// how a promoted or exploiting trial carries on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<super::InitFrom>,
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
    #[schema(max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
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
    /// The image as a full reference (`docker.io/library/python:3.12`), or why it is not one.
    pub fn image_reference(&self) -> Option<Result<String, String>> {
        self.image.as_deref().map(full_image_reference)
    }

    /// The names of the secrets the job's environment refers to.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.env.values().filter_map(EnvValue::secret)
    }
}

/// `reference` as a full OCI image reference (registry, repository, and tag or digest: `python` is
/// `docker.io/library/python:latest`), or why it is not one.
pub fn full_image_reference(reference: &str) -> Result<String, String> {
    if reference.len() > 512 {
        return Err("longer than 512 bytes".to_owned());
    }
    reference
        .parse::<oci_spec::distribution::Reference>()
        .map(|parsed| parsed.whole())
        .map_err(|err| {
            format!("not an OCI image reference ([registry/]repository[:tag][@digest]): {err}")
        })
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

/// `spec.command.argv`: the program and its arguments.
fn argv_schema() -> Schema {
    let argument = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(65536))
    };
    ArrayBuilder::new()
        .prefix_items([argument().min_length(Some(1))])
        .items(argument())
        .min_items(Some(1))
        .description(Some(
            "The program (not empty) and its arguments, each at most 65536 bytes of UTF-8.",
        ))
        .into()
}

/// `spec.command.env`.
fn env_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(ENV_NAME_PATTERN)),
        ))
        .additional_properties(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            "EnvValue",
        ))))
        .description(Some(
            "Environment variables (names `[A-Za-z_][A-Za-z0-9_]*`): a value, or `{secret: NAME}` \
             for one of the tenant's secrets (the value reaches only the task's process; the job \
             document keeps the reference). The secret must exist when the job is submitted.",
        ))
        .into()
}
