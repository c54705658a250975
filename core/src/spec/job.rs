//! The `DroverJob` document itself: its envelope (`apiVersion`, `kind`, metadata, status) and the job
//! spec, which gathers the parts the sibling modules define (train or command, resources,
//! distribution, scheduling, checkpoints).

use super::command::CommandSpec;
use super::defaults;
use super::resources::{CheckpointPolicy, Distributed, Resources, Scheduling};
use super::train::{InitFrom, TrainSpec};
use crate::document::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Version of the stored document's schema, kept beside it so later versions can upgrade old rows.
pub const SPEC_SCHEMA_VERSION: i32 = 1;

/// A training job or a command job, as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DroverJob {
    /// Always `drover.dev/v1`.
    #[serde(rename = "apiVersion")]
    #[schema(schema_with = crate::document::api_version)]
    pub api_version: String,
    /// Always `DroverJob`.
    #[schema(schema_with = crate::document::job_kind)]
    pub kind: String,
    #[schema(schema_with = crate::document::job_metadata)]
    pub metadata: ObjectMeta,
    pub spec: JobSpec,
    /// Written by Drover; ignored on submit (any value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
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
    #[schema(maximum = 100)]
    pub max_restarts: u32,
}

impl DroverJob {
    /// Total GPUs the job asks for at its largest shape.
    pub fn max_gpus(&self) -> u64 {
        u64::from(self.spec.resources.workers.max) * u64::from(self.spec.resources.gpus_per_worker)
    }

    /// The checkpoint the job starts from before it has one of its own (`train.init_from` or
    /// `command.init_from`), with the field that names it.
    pub fn init_from(&self) -> Option<(&InitFrom, &'static str)> {
        let train = self.spec.train.as_ref().and_then(|t| t.init_from.as_ref());
        let command = self
            .spec
            .command
            .as_ref()
            .and_then(|c| c.init_from.as_ref());
        train
            .map(|init| (init, "spec.train.init_from.checkpoint"))
            .or(command.map(|init| (init, "spec.command.init_from.checkpoint")))
    }

    /// The step the job stops at at the latest, when it declared one (`train.max_steps` or
    /// `command.max_steps`).
    pub fn max_steps(&self) -> Option<u64> {
        let train = self.spec.train.as_ref().and_then(|t| t.max_steps);
        train.or(self.spec.command.as_ref().and_then(|c| c.max_steps))
    }
}
