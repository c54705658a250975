//! A checkpoint's download: from the checkpoint directory (a file, or a tar archive of a directory,
//! read so that nothing a task planted leads outside the job's own directory), or from the object
//! store.

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathPair;
use crate::routes::jobs::parse_job_id;
use crate::state::AppState;
use axum::body::Body as ResponseBody;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use drover_core::JobId;

/// Downloads a checkpoint: the file itself, or a tar archive when the checkpoint is a directory.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/checkpoints/{checkpoint}/download", tag = "jobs",
    params(("id" = String, Path, description = "Job id"), ("checkpoint" = String, Path, description = "Checkpoint id")),
    responses(
        (status = 200, description = "The checkpoint's bytes", content_type = "application/octet-stream"),
        (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn download(
    State(state): State<AppState>,
    principal: Principal,
    PathPair(id, checkpoint): PathPair,
) -> ApiResult<Response> {
    let job_id = parse_job_id(&id)?;
    let checkpoint_id: uuid::Uuid = checkpoint
        .parse()
        .map_err(|_| ApiError::bad_request("checkpoint", "not a checkpoint id"))?;
    let records = state
        .store
        .list_checkpoints(principal.scope(), job_id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
    let record = records
        .into_iter()
        .find(|c| c.id == checkpoint_id)
        .ok_or_else(|| {
            ApiError::not_found(format!("no checkpoint `{checkpoint}` in job `{id}`"))
        })?;
    let Some(runtime) = &state.runtime else {
        return Err(ApiError::not_found("this server has no checkpoint storage"));
    };
    if let Some(storage) = &runtime.config.checkpoint_store {
        return download_from_store(storage, job_id, &record.path, &checkpoint).await;
    }
    let root = runtime.config.checkpoint_root.clone();
    let path = std::path::PathBuf::from(&record.path);
    let resolved = tokio::fs::canonicalize(&path).await.map_err(|_| {
        ApiError::not_found(format!("checkpoint `{checkpoint}` is no longer in storage"))
    })?;
    // Only inside this job's own directory of the storage: a symlink a task planted cannot lead the
    // download to another job's checkpoints or to any other file of the server.
    let root = tokio::fs::canonicalize(&root).await.unwrap_or(root);
    let job_root = root.join(job_id.0.to_string());
    if !resolved.starts_with(&job_root) || resolved == job_root {
        return Err(ApiError::not_found(format!(
            "checkpoint `{checkpoint}` is outside the checkpoint storage"
        )));
    }
    let base = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".to_owned());
    let metadata = tokio::fs::metadata(&resolved).await.map_err(|err| {
        tracing::error!(path = %resolved.display(), error = %err, "cannot read a checkpoint");
        ApiError::internal()
    })?;
    // A task can still swap a path component for a symlink after the check above: every file is
    // opened first and then checked by what it really is (`open_within`), never by its path.
    let escaped = |err: &std::io::Error| err.kind() == std::io::ErrorKind::PermissionDenied;
    let refuse = move |err: std::io::Error| {
        if escaped(&err) {
            tracing::warn!(job.id = %job_id, error = %err, "refused a checkpoint download that leads outside the job's storage");
            ApiError::not_found(format!(
                "checkpoint `{checkpoint}` is outside the checkpoint storage"
            ))
        } else {
            tracing::error!(job.id = %job_id, error = %err, "cannot read a checkpoint");
            ApiError::internal()
        }
    };
    let (file, name) = if metadata.is_dir() {
        let archive = tokio::task::spawn_blocking(move || {
            crate::checkpoint_files::tar_directory(&resolved, &job_root)
        })
        .await
        .map_err(|_| ApiError::internal())?
        .map_err(refuse.clone())?;
        (tokio::fs::File::from_std(archive), format!("{base}.tar"))
    } else {
        let file = tokio::task::spawn_blocking(move || {
            crate::checkpoint_files::open_within(&resolved, &job_root)
        })
        .await
        .map_err(|_| ApiError::internal())?
        .map_err(refuse)?;
        (tokio::fs::File::from_std(file), base)
    };
    let body = ResponseBody::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok(attachment(body, &name))
}

/// A checkpoint's download from an object store: the object itself, or a tar archive of the objects
/// under it.
async fn download_from_store(
    storage: &crate::checkpoint_store::ObjectStorage,
    job_id: JobId,
    location: &str,
    checkpoint: &str,
) -> ApiResult<Response> {
    use object_store::ObjectStore;
    let failed = |err: anyhow::Error| {
        tracing::error!(job.id = %job_id, location, error = %err, "cannot read a checkpoint from the store");
        ApiError::internal()
    };
    let entries = storage
        .entries(location, job_id)
        .await
        .map_err(failed)?
        .ok_or_else(|| {
            ApiError::not_found(format!("checkpoint `{checkpoint}` is no longer in storage"))
        })?;
    let base = location
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or("checkpoint")
        .to_owned();
    if let [single] = entries.as_slice()
        && single.name.is_empty()
    {
        let object = storage
            .store()
            .get(&single.key)
            .await
            .map_err(|err| failed(err.into()))?;
        return Ok(attachment(
            ResponseBody::from_stream(object.into_stream()),
            &base,
        ));
    }
    let archive = storage.tar(&base, entries).await.map_err(failed)?;
    let file = tokio::fs::File::from_std(archive);
    Ok(attachment(
        ResponseBody::from_stream(tokio_util::io::ReaderStream::new(file)),
        &format!("{base}.tar"),
    ))
}

/// A download response: the bytes as an attachment named `name`.
fn attachment(body: ResponseBody, name: &str) -> Response {
    let disposition = format!("attachment; filename=\"{}\"", name.replace('"', ""));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}
