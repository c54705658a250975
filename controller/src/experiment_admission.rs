//! Admitting a DroverExperiment: the object as the API's document, the experiment made for it (once,
//! keyed by the object's uid), and edits of its spec, which cannot change a submitted experiment.
//!
//! The uid travels in the experiment document's annotation [`UID_ANNOTATION`]; the experiment has the
//! object's name (or, when an ended experiment holds that name, `NAME-<uid prefix>`). The object's
//! experiment is the one of either name in its tenant that carries its uid and was submitted by the
//! tenant's `kubernetes` user, so a controller restarted between creating the experiment and writing
//! status finds it again, and an object deleted and applied again (a new uid) gets a new one.

use super::admission::Admitted;
use super::context::{Context, Error};
use super::edits::changed_fields;
use super::experiment_crd::DroverExperiment;
use super::status::pascal;
use drover_core::experiment::EXPERIMENT_KIND;
use drover_core::experiment_validate::MAX_EXPERIMENT_NAME;
use drover_core::spec::{API_VERSION, Format, SpecError};
use drover_service::auth::Principal;
use drover_service::experiments::steer::create as create_experiment;
use drover_store::Experiment;
use kube::ResourceExt;
use serde_json::json;

/// The annotation of an experiment document that names the DroverExperiment (its uid) it was made for.
pub const UID_ANNOTATION: &str = "drover.dev/kubernetes-uid";

impl Admitted for DroverExperiment {
    fn recorded_tenant(&self) -> Option<String> {
        self.status
            .as_ref()
            .filter(|status| status.experiment_id.is_some())
            .and_then(|status| status.tenant.clone())
    }
}

/// The object as the API's experiment document, validated by the API's own parser (the field paths in
/// its errors are the object's), with the object's uid in [`UID_ANNOTATION`]. Kubernetes' own
/// metadata (annotations, managed fields) stays out; labels go to the trial jobs, as over REST.
pub(super) fn document_of(
    obj: &DroverExperiment,
) -> Result<drover_core::experiment::DroverExperiment, SpecError> {
    let document = json!({
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {
            "name": obj.name_any(),
            "labels": obj.labels(),
            "annotations": {UID_ANNOTATION: obj.uid().unwrap_or_default()},
            "namespace": obj.namespace(),
        },
        "spec": obj.spec,
    });
    let bytes = serde_json::to_vec(&document).unwrap_or_default();
    drover_core::experiment::DroverExperiment::parse(&bytes, Format::Json)
}

/// The name the experiment takes when an ended one holds the object's: `NAME-<uid prefix>`, within
/// the longest experiment name.
fn suffixed_name(obj: &DroverExperiment) -> String {
    let uid: String = obj.uid().unwrap_or_default().chars().take(8).collect();
    let stem: String = obj
        .name_any()
        .chars()
        .take(MAX_EXPERIMENT_NAME - 1 - uid.len())
        .collect();
    format!("{}-{uid}", stem.trim_end_matches('-'))
}

/// Whether `experiment` was made for the object: its uid in the annotation, submitted by the
/// tenant's `kubernetes` user.
fn made_for(experiment: &Experiment, obj: &DroverExperiment, controller: &Principal) -> bool {
    let uid = obj.uid().unwrap_or_default();
    let annotated = experiment
        .document
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(UID_ANNOTATION))
        .and_then(serde_json::Value::as_str);
    !uid.is_empty()
        && annotated == Some(uid.as_str())
        && experiment.submitted_by == controller.user.id
}

/// The experiment made for the object, if there is one (see the module's header).
pub(super) async fn experiment_of(
    obj: &DroverExperiment,
    ctx: &Context,
    controller: &Principal,
) -> Result<Option<Experiment>, Error> {
    let store = ctx.service.store.as_ref();
    for name in [obj.name_any(), suffixed_name(obj)] {
        if let Some(experiment) = store
            .experiment_by_name(controller.user.tenant_id, &name)
            .await?
            && made_for(&experiment, obj, controller)
        {
            return Ok(Some(experiment));
        }
    }
    Ok(None)
}

/// Submits the object's experiment; a user's problem (name taken, role) comes back as (reason,
/// message).
pub(super) async fn submit(
    ctx: &Context,
    controller: &Principal,
    obj: &DroverExperiment,
    mut document: drover_core::experiment::DroverExperiment,
) -> Result<Result<Experiment, (String, String)>, Error> {
    let name = document.metadata.name.clone();
    for attempt in 0..2 {
        match create_experiment(&ctx.service, controller, document.clone()).await {
            Ok(created) => return Ok(Ok(created)),
            Err(err) if err.is_client_error() => {
                let taken = err.field.as_deref() == Some("metadata.name")
                    && err.kind == drover_service::ErrorKind::Conflict;
                if taken && attempt == 0 && name_ended(ctx, controller, &name).await? {
                    // An ended experiment has the name (the object was deleted and applied again):
                    // the new one takes the name with the object's uid.
                    document.metadata.name = suffixed_name(obj);
                    continue;
                }
                let reason = if taken {
                    "NameTaken".to_owned()
                } else {
                    pascal(err.code)
                };
                let field = err.field.map(|f| format!("{f}: ")).unwrap_or_default();
                return Ok(Err((reason, format!("{field}{}", err.message))));
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(Err((
        "NameTaken".to_owned(),
        format!(
            "experiments named `{name}` and `{}` exist in the tenant",
            suffixed_name(obj)
        ),
    )))
}

/// Whether the experiment holding `name` in the tenant has ended (so a suffixed name may be used).
async fn name_ended(ctx: &Context, controller: &Principal, name: &str) -> Result<bool, Error> {
    Ok(ctx
        .service
        .store
        .experiment_by_name(controller.user.tenant_id, name)
        .await?
        .is_some_and(|experiment| experiment.state.is_terminal()))
}

/// The first field of the object's spec that differs from what the experiment runs, if any: a
/// submitted experiment's spec cannot change.
pub(super) fn edited_field(
    experiment: &Experiment,
    document: &drover_core::experiment::DroverExperiment,
) -> Option<String> {
    let stored = experiment.document.get("spec")?;
    let wanted = serde_json::to_value(&document.spec).ok()?;
    let mut changed = Vec::new();
    changed_fields(stored, &wanted, "spec", &mut changed);
    changed.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../examples/k8s/digits-asha.yaml");

    fn object(name: &str) -> DroverExperiment {
        let mut obj: DroverExperiment = serde_yaml::from_str(EXAMPLE).unwrap_or_else(|err| {
            panic!("examples/k8s/digits-asha.yaml is not a DroverExperiment: {err}")
        });
        obj.metadata.name = Some(name.to_owned());
        obj.metadata.uid = Some("6b1c0d7e-1111-4222-8333-944455556666".to_owned());
        obj
    }

    #[test]
    fn the_document_carries_the_uid_and_the_spec() {
        let document = document_of(&object("digits-asha")).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(document.metadata.name, "digits-asha");
        assert_eq!(
            document.metadata.annotations.get(UID_ANNOTATION).cloned(),
            Some("6b1c0d7e-1111-4222-8333-944455556666".to_owned())
        );
        assert_eq!(document.spec.searcher.name(), "asha");
        // The labels reach the trial jobs; Kubernetes' annotations do not.
        assert_eq!(
            document.metadata.labels.get("team").cloned(),
            Some("vision".to_owned())
        );
        assert_eq!(document.metadata.annotations.len(), 1);
    }

    #[test]
    fn an_invalid_spec_names_its_field() {
        let mut obj = object("digits-asha");
        obj.spec.experiment.parameters.insert(
            "train.batch_size".to_owned(),
            drover_core::experiment::Param::Int {
                min: 256,
                max: 16,
                log: false,
                when: None,
            },
        );
        let err = document_of(&obj).err().map(|e| e.field);
        assert_eq!(err.as_deref(), Some("spec.parameters.train.batch_size.max"));
    }

    #[test]
    fn the_suffixed_name_fits_an_experiment_name() {
        assert_eq!(
            suffixed_name(&object("digits-asha")),
            "digits-asha-6b1c0d7e"
        );
        let long = suffixed_name(&object(&"a".repeat(45)));
        assert_eq!(long.len(), MAX_EXPERIMENT_NAME);
        assert!(long.ends_with("a-6b1c0d7e"));
    }
}
