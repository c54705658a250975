//! The queue: every waiting job's place in the order the policy would start jobs, its reason, and its
//! predicted start and finish with a band (`drover_service::queue`, shared with the dashboard).

use crate::error::{ApiResult, ErrorBody};
use crate::extract::QueryPairs;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use drover_service::auth::Principal;
use drover_service::queue::{MAX_QUEUE, QueueView};

/// The queued jobs the caller may see, in the order the policy would start them, a page at a time.
#[utoipa::path(
    get, path = "/api/v1/queue", tag = "jobs",
    params(
        ("tenant" = Option<String>, Query, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
         description = "Only this tenant's jobs: cluster administrators any tenant's, others their own only"),
        ("offset" = Option<u32>, Query, minimum = 0, maximum = 5000, description = "Skip this many jobs of the queue (default 0); `total` says how many there are"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 5000, description = "At most this many jobs, 1 to 5000 (default 500)"),
    ),
    responses(
        (status = 200, body = QueueView),
        (status = 400, description = "A malformed `offset` or `limit`, or an unknown parameter", body = ErrorBody),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<QueueView>> {
    query.only(&["tenant", "offset", "limit"])?;
    let offset = query.offset(MAX_QUEUE)?;
    let limit = query.limit(500, MAX_QUEUE)?;
    let scope =
        drover_service::auth::tenant_scope(&state, &principal, query.get("tenant"), "queue")
            .await?;
    Ok(Json(
        drover_service::queue::list(&state, scope, offset, limit).await?,
    ))
}
