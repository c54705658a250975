//! The `DroverJob` custom resource: the same spec the REST API takes (`drover_core::spec::JobSpec`),
//! wrapped by kube's derive, and the status the controller writes back.
//!
//! The CRD's schema is generated from those types ([`crd`]); `drover crd` prints it and a test holds the
//! chart's copy to it. Kubernetes checks structure and types when an object is applied; everything
//! else (ranges, combinations, names) is the API's own validation, run by the controller, which
//! reports a bad spec as a condition and an Event.

use super::schema::{structural_crd, yaml_of};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer the controller puts on every DroverJob: deleting the object cancels the job first.
pub const FINALIZER: &str = "drover.dev/cancel-job";

/// A DroverJob's spec: exactly the document's `spec`.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "drover.dev",
    version = "v1",
    kind = "DroverJob",
    plural = "droverjobs",
    singular = "droverjob",
    shortname = "dj",
    category = "drover",
    namespaced,
    status = "DroverJobStatus",
    doc = "A Drover training or command job: `kubectl apply` submits it, `kubectl delete` cancels it.",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state","description":"The job's state in Drover"}"#,
    printcolumn = r#"{"name":"Workers","type":"string","jsonPath":".status.workers","description":"Workers now (of the spec's range)"}"#,
    printcolumn = r#"{"name":"PS","type":"string","jsonPath":".status.ps","description":"Parameter-server shards now"}"#,
    printcolumn = r#"{"name":"GPUs","type":"integer","jsonPath":".status.gpus","description":"GPUs held now"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress","description":"Steps done of the budget"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason","priority":1,"description":"Why the job is in its state"}"#,
    printcolumn = r#"{"name":"Starts","type":"date","jsonPath":".status.predictedStart","priority":1,"description":"Predicted start while queued"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DroverJobSpec {
    #[serde(flatten)]
    pub job: drover_core::spec::JobSpec,
}

/// What the controller writes back: the job in Drover, its shape and progress, and conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DroverJobStatus {
    /// The job's id in Drover (`drover job ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The tenant the namespace maps to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// queued, starting, running, rescaling, paused, succeeded, failed or cancelled; `Invalid` or
    /// `Waiting` before Drover has the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The reason code of the state (for a queued job, why it waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Workers running now, e.g. `2` (or `0` while queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<String>,
    /// Parameter-server shards running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ps: Option<String>,
    /// GPUs the job holds now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// `step/max_steps (NN%)`, or the step alone when the job has no step budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The newest value of each metric the job reported is on its page; this is the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_metric: Option<LastMetric>,
    /// Checkpoints recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<u32>,
    /// While queued: its place in the order the policy would start jobs (1 first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// While queued: when it should start (RFC 3339), from the queue forecast; `null` beyond its
    /// 30-day horizon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_start: Option<String>,
    /// The latest start the forecast's band gives (every job at its 90th percentile estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_start_p90: Option<String>,
    /// The id of the last job event published as a Kubernetes Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<i64>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One metric value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LastMetric {
    pub name: String,
    pub step: u64,
    /// As text: a CRD cannot hold a float portably (`number` loses nothing, but printers differ).
    pub value: String,
}

/// The CRD as the API server takes it, made structural (`schema.rs` says what that removes).
pub fn crd() -> CustomResourceDefinition {
    structural_crd::<DroverJob>()
}

/// The CRD as YAML, as `drover crd droverjob` prints it and the chart ships it.
pub fn crd_yaml() -> String {
    yaml_of(&crd())
}

/// Every CRD Drover defines, by its singular name (the chart's file is `crds/<name>.yaml`), as YAML.
pub fn all_crds_yaml() -> [(&'static str, String); 2] {
    [
        ("droverjob", crd_yaml()),
        (
            "droverexperiment",
            super::experiment_crd::experiment_crd_yaml(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::check_structural;

    #[test]
    fn the_charts_crd_is_what_the_code_generates() {
        let shipped = include_str!("../../charts/drover/crds/droverjob.yaml");
        assert!(
            shipped == crd_yaml(),
            "charts/drover/crds/droverjob.yaml differs from the Rust types: run `cargo run -- crd droverjob > charts/drover/crds/droverjob.yaml`"
        );
    }

    #[test]
    fn the_schema_is_structural() {
        let crd = serde_json::to_value(crd()).unwrap_or_default();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        check_structural(schema, "", &mut problems);
        assert!(problems.is_empty(), "not structural: {problems:#?}");
        // The spec's own fields are there, the tagged enums as one object each.
        let spec = &schema["properties"]["spec"]["properties"];
        assert_eq!(
            spec["type"]["enum"],
            serde_json::json!(["train", "command"])
        );
        let model = &spec["train"]["properties"]["model"];
        assert_eq!(
            model["properties"]["type"]["enum"],
            serde_json::json!(["mlp", "cnn", "charlm"])
        );
        assert_eq!(model["required"], serde_json::json!(["type"]));
        assert_eq!(
            spec["resources"]["properties"]["workers"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let columns: Vec<&str> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            columns,
            [
                "State", "Workers", "PS", "GPUs", "Progress", "Reason", "Starts", "Age"
            ]
        );
        assert_eq!(
            crd["spec"]["versions"][0]["subresources"]["status"],
            serde_json::json!({})
        );
    }
}
