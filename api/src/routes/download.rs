//! A checkpoint's download: from the checkpoint directory (a file, or a tar archive of a directory,
//! read so that nothing a task planted leads outside the job's own directory), or from the object
//! store.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::PathPair;
use crate::routes::jobs::parse_job_id;
use crate::state::AppState;
use axum::body::Body as ResponseBody;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use drover_core::JobId;
use drover_service::auth::Principal;

/// Downloads a checkpoint: the file itself, or a tar archive when the checkpoint is a directory.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/checkpoints/{checkpoint}/download", tag = "jobs",
    params(
        ("id" = String, Path, format = Uuid, description = "Job id"),
        ("checkpoint" = String, Path, format = Uuid, description = "Checkpoint id"),
    ),
    responses(
        (status = 200, description = "The checkpoint's bytes", content_type = "application/octet-stream"),
        (status = 404, description = "No such job or checkpoint (a malformed id is none), or the checkpoint is no longer in storage", body = ErrorBody),
        (status = 422, description = "A checkpoint directory too large to archive: download its files one by one", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn download(
    State(state): State<AppState>,
    principal: Principal,
    PathPair(id, checkpoint): PathPair,
) -> ApiResult<Response> {
    let job_id = parse_job_id(&id)?;
    // A malformed checkpoint id is simply an unknown checkpoint, as a malformed job id is an unknown job.
    let checkpoint_id: uuid::Uuid = checkpoint
        .parse()
        .map_err(|_| ApiError::not_found(format!("no checkpoint `{checkpoint}` in job `{id}`")))?;
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
    let shown = checkpoint.clone();
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
    if metadata.is_dir() {
        let name = format!("{base}.tar");
        return stream_directory(resolved, job_root, job_id, &shown, refuse)
            .await
            .map(|body| attachment(body, &name));
    }
    let file = tokio::task::spawn_blocking(move || {
        drover_runtime::checkpoint_files::open_within(&resolved, &job_root)
    })
    .await
    .map_err(|_| ApiError::internal())?
    .map_err(refuse)?;
    let body = ResponseBody::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    Ok(attachment(body, &base))
}

/// Directory downloads in progress at once: each holds a blocking thread while its client reads.
const DIRECTORY_DOWNLOADS: usize = 16;
static DIRECTORY_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(DIRECTORY_DOWNLOADS);
/// Bytes handed to the response at a time, and chunks in flight: the archive is written as the
/// client reads it, never staged.
const CHUNK: usize = 256 << 10;
const CHUNKS_IN_FLIGHT: usize = 4;

/// A tar archive of a checkpoint directory, written as the client reads it: the files are listed
/// first (an error before any byte is an error response), then each is opened with
/// `open_within` and copied. A client that goes away stops the copy at its next chunk; a failure
/// midway (a file swapped for a symlink out of the job's storage) ends the body with an error.
async fn stream_directory(
    dir: std::path::PathBuf,
    job_root: std::path::PathBuf,
    job_id: JobId,
    checkpoint: &str,
    refuse: impl FnOnce(std::io::Error) -> ApiError,
) -> ApiResult<ResponseBody> {
    let permit = DIRECTORY_PERMITS.try_acquire().map_err(|_| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "{DIRECTORY_DOWNLOADS} checkpoint directory downloads are in progress; try again \
                 when one has finished"
            ),
        )
    })?;
    let listed = dir.clone();
    let files = tokio::task::spawn_blocking(move || {
        drover_runtime::checkpoint_files::list_directory(&listed)
    })
    .await
    .map_err(|_| ApiError::internal())?
    .map_err(|err| {
        if err.kind() == std::io::ErrorKind::Other {
            ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "too_large",
                format!("checkpoint `{checkpoint}`: {err}; download its files one by one"),
            )
        } else {
            refuse(err)
        }
    })?;
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = ChunkWriter {
            tx,
            buffer: Vec::with_capacity(CHUNK),
        };
        let written = drover_runtime::checkpoint_files::write_tar(&files, &job_root, &mut out);
        match written {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(err) => {
                tracing::warn!(job.id = %job_id, dir = %dir.display(), error = %err, "a checkpoint download stopped midway");
                let _ = out.tx.blocking_send(Err(err));
            }
        }
    });
    Ok(ResponseBody::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

/// Hands what is written to a response body in chunks of [`CHUNK`], waiting while the client is
/// [`CHUNKS_IN_FLIGHT`] chunks behind; once the body is gone, writes fail with `BrokenPipe`.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(bytes::Bytes::from(chunk)))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let taken = data.len().min(CHUNK - self.buffer.len());
        self.buffer.extend_from_slice(&data[..taken]);
        if self.buffer.len() == CHUNK {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// A checkpoint's download from an object store: the object itself, or a tar archive of the objects
/// under it.
async fn download_from_store(
    storage: &drover_runtime::checkpoint_store::ObjectStorage,
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
