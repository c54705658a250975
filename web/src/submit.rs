//! Submitting a job or an experiment: a DroverJob or DroverExperiment pasted or uploaded, sent through
//! the service's own submissions, so it is validated by the same code and refused with the same
//! field-level error, shown beside the editor. "Clone" on a job page opens this page with that job's spec under a new name.

use crate::page::{Layout, cross_site, error_page, render, see_other};
use crate::session::Session;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use drover_api::auth;
use drover_api::error::ApiError;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_core::DroverJob;
use drover_core::experiment::{DroverExperiment, EXPERIMENT_KIND};
use drover_core::spec::Format;
use serde::Deserialize;

const EXAMPLE: &str = include_str!("../../examples/digits-mlp.yaml");

#[derive(askama::Template)]
#[template(path = "submit.html")]
struct SubmitPage {
    layout: Layout,
    document: String,
    error: Option<String>,
    field: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct SubmitQuery {
    from: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<SubmitQuery>,
) -> Response {
    let document = match query.from {
        None => example(),
        Some(id) => match drover_service::jobs::get(&state, &session.principal, &id).await {
            Ok(detail) => clone_spec(api::job_view(detail).spec),
            Err(err) => return error_page(err.into()),
        },
    };
    render(&SubmitPage {
        layout: session.layout("submit"),
        document,
        error: None,
        field: None,
    })
}

/// The example the form starts with, named by the server (`generateName`): submitted as it is
/// twice, it makes two jobs rather than failing on a name already taken.
fn example() -> String {
    EXAMPLE.replacen("  name: digits-mlp\n", "  generateName: digits-mlp-\n", 1)
}

/// A job's spec as YAML to submit again: its status dropped, its name a `generateName` from it (the
/// server adds five characters), so each submission of the copy gets a name of its own.
fn clone_spec(spec: Option<serde_json::Value>) -> String {
    let Some(mut spec) = spec else {
        return example();
    };
    if let Some(object) = spec.as_object_mut() {
        object.remove("status");
    }
    if let Some(metadata) = spec
        .pointer_mut("/metadata")
        .and_then(|m| m.as_object_mut())
    {
        let base = metadata
            .remove("name")
            .and_then(|n| n.as_str().map(str::to_owned))
            .or_else(|| {
                metadata
                    .get("generateName")
                    .and_then(|n| n.as_str())
                    .map(|n| n.trim_end_matches('-').to_owned())
            })
            .unwrap_or_else(|| "job".to_owned());
        let prefix: String = base
            .chars()
            .take(drover_core::validate::MAX_NAME_PREFIX - 1)
            .collect();
        metadata.insert(
            "generateName".to_owned(),
            serde_json::Value::String(format!("{}-", prefix.trim_end_matches('-'))),
        );
    }
    serde_yaml::to_string(&spec).unwrap_or_default()
}

#[derive(Debug, Deserialize)]
struct SubmitForm {
    #[serde(rename = "_csrf")]
    csrf: String,
    document: String,
}

pub async fn submit(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(form) = serde_urlencoded::from_bytes::<SubmitForm>(&body) else {
        return (StatusCode::BAD_REQUEST, "the form was malformed").into_response();
    };
    let csrf_ok =
        auth::session_cookie(&headers).is_some_and(|cookie| auth::csrf_matches(cookie, &form.csrf));
    if !csrf_ok || cross_site(&headers) {
        return (
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale; reload the page",
        )
            .into_response();
    }
    // A DroverExperiment goes to the experiments' own submission, a DroverJob to the jobs'.
    let bytes = form.document.as_bytes();
    let submitted = if drover_core::declares_kind(bytes, EXPERIMENT_KIND) {
        async {
            let experiment = DroverExperiment::parse(bytes, Format::Yaml)?;
            let created =
                drover_service::experiments::steer::create(&state, &session.principal, experiment)
                    .await?;
            Ok::<_, drover_service::ServiceError>(format!("/experiments/{}", created.id))
        }
        .await
    } else {
        async {
            let mut job = DroverJob::parse(bytes, Format::Yaml)?;
            job.status = None;
            let created =
                drover_service::jobs::submit(&state, &session.principal, job, None, None).await?;
            Ok::<_, drover_service::ServiceError>(format!("/jobs/{}", created.value.id))
        }
        .await
    };
    match submitted {
        Ok(location) => see_other(&location),
        Err(err) if err.is_client_error() => {
            let status = ApiError::from(err.clone()).status;
            let page = SubmitPage {
                layout: session.layout("submit"),
                document: form.document,
                error: Some(err.message),
                field: err.field,
            };
            (status, render(&page)).into_response()
        }
        Err(err) => error_page(err.into()),
    }
}
