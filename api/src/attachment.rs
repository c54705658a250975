//! A file about a job that its readers download, streamed (a log as text, metrics as CSV): the job's
//! name for the file, read first so that a job the caller cannot see is a 404 before any byte, and the
//! response that streams the file as an attachment.

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use drover_core::JobId;
use drover_store::Scope;

/// The name of `job` as `scope` sees it (a 404 for a job it cannot see).
pub async fn job_name(state: &AppState, scope: Scope, job: JobId) -> ApiResult<String> {
    Ok(state
        .store
        .get_job(scope, job)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{job}`")))?
        .name)
}

/// `body` as a download named `filename`, of `content_type`.
pub fn streamed<S>(body: S, content_type: &'static str, filename: &str) -> Response
where
    S: futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
{
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Job names are DNS labels: safe in a header as they are.
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}
