//! Submitting a job: a DroverJob pasted or uploaded, sent through the API's own submit handler, so it
//! is validated by the same code and refused with the same field-level error, shown beside the
//! editor. "Clone" on a job page opens this page with that job's spec under a new name.

use crate::{Layout, Session, cross_site, error_page, render, see_other};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_api::auth;
use drover_api::extract::{Body, PathParam};
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
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
        None => EXAMPLE.to_owned(),
        Some(id) => {
            let got = api::get(
                State(state.clone()),
                session.principal.clone(),
                PathParam(id),
            )
            .await;
            match got {
                Ok(axum::Json(envelope)) => clone_spec(envelope.job.spec),
                Err(err) => return error_page(err),
            }
        }
    };
    render(&SubmitPage {
        layout: session.layout("submit"),
        document,
        error: None,
        field: None,
    })
}

/// A job's spec as YAML to submit again: its status dropped, its name marked as a copy.
fn clone_spec(spec: Option<serde_json::Value>) -> String {
    let Some(mut spec) = spec else {
        return EXAMPLE.to_owned();
    };
    if let Some(object) = spec.as_object_mut() {
        object.remove("status");
    }
    if let Some(name) = spec.pointer_mut("/metadata/name") {
        let copy = format!("{}-copy", name.as_str().unwrap_or("job"));
        *name = serde_json::Value::String(copy.chars().take(63).collect());
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
    let mut api_headers = HeaderMap::new();
    api_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    let submitted = api::submit(
        State(state.clone()),
        session.principal.clone(),
        api_headers,
        Body(Bytes::from(form.document.clone())),
    )
    .await;
    match submitted {
        Ok(response) if response.status().is_success() => {
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| l.strip_prefix("/api/v1"))
                .unwrap_or("/jobs")
                .to_owned();
            see_other(&location)
        }
        Ok(response) => error_page(drover_api::error::ApiError::new(
            response.status(),
            "submit",
            "the job was not accepted",
        )),
        Err(err) if err.status.is_client_error() => {
            let page = SubmitPage {
                layout: session.layout("submit"),
                document: form.document,
                error: Some(err.message),
                field: err.field,
            };
            (err.status, render(&page)).into_response()
        }
        Err(err) => error_page(err),
    }
}
