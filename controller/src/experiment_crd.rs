//! The `DroverExperiment` custom resource: the same spec `drover experiment submit` and the REST API
//! take (`drover_core::experiment::ExperimentSpec`), wrapped by kube's derive, and the status the
//! experiment controller (`experiments.rs`) writes back.
//!
//! Its CRD is generated like the DroverJob's ([`super::crd`]), made structural the same way
//! (`schema.rs`); a test holds the chart's copy (`charts/drover/crds/droverexperiment.yaml`) to it.
//! Kubernetes checks structure and types when an object is applied; the rest (ranges such as
//! `min <= max`, the trial template built from the space's corners) is the API's own validation, run
//! by the controller.

use super::schema::{structural_crd, yaml_of};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer the controller puts on every DroverExperiment: deleting the object cancels the
/// experiment (and its running trials) first.
pub const EXPERIMENT_FINALIZER: &str = "drover.dev/cancel-experiment";

/// A DroverExperiment's spec: exactly the experiment document's `spec`.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "drover.dev",
    version = "v1",
    kind = "DroverExperiment",
    plural = "droverexperiments",
    singular = "droverexperiment",
    shortname = "dx",
    category = "drover",
    namespaced,
    status = "DroverExperimentStatus",
    doc = "A Drover hyper-parameter search: `kubectl apply` submits it, `kubectl delete` cancels it and its running trials.",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state","description":"The experiment's state in Drover"}"#,
    printcolumn = r#"{"name":"Trials","type":"integer","jsonPath":".status.trials","description":"Trials started"}"#,
    printcolumn = r#"{"name":"Active","type":"integer","jsonPath":".status.activeTrials","description":"Trials not yet ended"}"#,
    printcolumn = r#"{"name":"Best","type":"string","jsonPath":".status.bestValue","description":"The best value of the metric"}"#,
    printcolumn = r#"{"name":"Metric","type":"string","jsonPath":".status.metric","description":"The metric the search optimises"}"#,
    printcolumn = r#"{"name":"Best Trial","type":"integer","jsonPath":".status.bestTrial","priority":1,"description":"The trial with the best value"}"#,
    printcolumn = r#"{"name":"Searcher","type":"string","jsonPath":".spec.searcher.type","priority":1,"description":"How trials are chosen"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason","priority":1,"description":"Why Drover does not have the experiment"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct DroverExperimentSpec {
    #[serde(flatten)]
    pub experiment: drover_core::experiment::ExperimentSpec,
}

/// What the controller writes back: the experiment in Drover, its trials and best value, conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DroverExperimentStatus {
    /// The experiment's id in Drover (`drover experiment get ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment_id: Option<String>,
    /// The tenant the namespace maps to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// active, paused, succeeded, failed or cancelled (as `drover experiment get` says); `Invalid` or
    /// `Waiting` before Drover has the experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why Drover does not have the experiment (InvalidSpec, UnknownTenant, NameTaken, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Drover's message: what ended the experiment, or why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The metric the search optimises (`spec.metric.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Trials started so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u32>,
    /// Trials not yet ended (running, or waiting for GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_trials: Option<u32>,
    /// The trial with the best value so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_trial: Option<u32>,
    /// Its value, as text (a CRD cannot hold a float portably).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_value: Option<String>,
    /// The id of the last experiment event published as a Kubernetes Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<i64>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The DroverExperiment CRD as the API server takes it (structural, as [`super::crd::crd`]).
pub fn experiment_crd() -> CustomResourceDefinition {
    structural_crd::<DroverExperiment>()
}

/// The CRD as YAML, as `drover crd droverexperiment` prints it and the chart ships it.
pub fn experiment_crd_yaml() -> String {
    yaml_of(&experiment_crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::check_structural;
    use serde_json::{Value, json};

    #[test]
    fn the_charts_experiment_crd_is_what_the_code_generates() {
        let shipped = include_str!("../../charts/drover/crds/droverexperiment.yaml");
        assert!(
            shipped == experiment_crd_yaml(),
            "charts/drover/crds/droverexperiment.yaml differs from the Rust types: run `cargo run -- crd droverexperiment > charts/drover/crds/droverexperiment.yaml`"
        );
    }

    #[test]
    fn the_experiment_schema_is_structural() {
        let crd = serde_json::to_value(experiment_crd()).unwrap_or_default();
        let version = &crd["spec"]["versions"][0];
        let schema = &version["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        check_structural(schema, "", &mut problems);
        assert!(problems.is_empty(), "not structural: {problems:#?}");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["dx"]));
        assert_eq!(crd["spec"]["names"]["categories"], json!(["drover"]));
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let spec = &schema["properties"]["spec"]["properties"];
        // The trial template is a DroverJob spec; the tagged enums are one object each.
        assert_eq!(
            spec["trial"]["properties"]["type"]["enum"],
            json!(["train", "command"])
        );
        assert_eq!(
            spec["searcher"]["properties"]["type"]["enum"],
            json!(["grid", "random", "tpe", "asha", "hyperband", "pbt"])
        );
        let param = &spec["parameters"]["additionalProperties"];
        assert_eq!(
            param["properties"]["type"]["enum"],
            json!(["const", "int", "double", "log_uniform", "categorical"])
        );
        // `int` bounds are integers and `double` ones reals: in the one object, numbers.
        assert_eq!(param["properties"]["min"]["type"], "number");
        // Categories are any JSON values.
        assert_eq!(
            param["properties"]["values"]["items"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            columns,
            [
                "State",
                "Trials",
                "Active",
                "Best",
                "Metric",
                "Best Trial",
                "Searcher",
                "Reason",
                "Age"
            ]
        );
        assert_eq!(version["subresources"]["status"], json!({}));
        let status = &schema["properties"]["status"]["properties"];
        for field in [
            "experimentId",
            "tenant",
            "state",
            "trials",
            "activeTrials",
            "bestTrial",
            "bestValue",
            "metric",
            "conditions",
            "observedGeneration",
        ] {
            assert!(status.get(field).is_some_and(Value::is_object), "{field}");
        }
    }
}
