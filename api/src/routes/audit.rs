//! `GET /api/v1/audit`: the audit log of privileged actions, newest first (cluster administrators).

use crate::error::{ApiResult, ErrorBody};
use crate::extract::QueryPairs;
use crate::paging::ListMeta;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use drover_service::auth::Principal;
use drover_store::AuditEvent;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The user's name, or `node:NAME` for an executor's enrolment.
    pub actor: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<Uuid>,
    /// `tenant.create`, `token.revoke`, `node.revoke`, `secret.set`, ...
    pub action: String,
    pub target: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl From<AuditEvent> for AuditView {
    fn from(event: AuditEvent) -> Self {
        AuditView {
            id: event.id,
            at: event.at,
            actor: event.actor,
            actor_id: event.actor_id.map(|u| u.0),
            tenant_id: event.tenant_id.map(|t| t.0),
            action: event.action,
            target: event.target,
            detail: event.detail,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditList {
    pub events: Vec<AuditView>,
    pub meta: ListMeta,
}

/// The audit log, newest first (cluster administrators).
#[utoipa::path(
    get, path = "/api/v1/audit", tag = "audit",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1 to 500 (default 100)"),
        ("cursor" = Option<i64>, Query, description = "`meta.next_cursor` of the previous page (an event's id)"),
    ),
    responses((status = 200, body = AuditList), (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Json<AuditList>> {
    principal.require_cluster_admin()?;
    query.only(&["limit", "cursor"])?;
    let limit = query.limit(100, 500)?;
    let before = query.id_cursor()?;
    let events = state.store.list_audit(before, limit).await?;
    let next_cursor = (events.len() == limit as usize)
        .then(|| events.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(AuditList {
        events: events.into_iter().map(AuditView::from).collect(),
        meta: ListMeta { next_cursor },
    }))
}
