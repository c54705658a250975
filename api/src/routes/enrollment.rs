//! `/api/v1/enrollment-tokens` and `POST /api/v1/nodes/{name}/revoke`: how executors come to be trusted
//! and stop being trusted. Cluster administrators only. An enrolment token is exchanged by an executor
//! for its node's credential (see `cluster/enrol.rs`); revoking a node's credential ends its session.

use super::tokens::expiry;
use crate::auth::{ENROLLMENT_PREFIX, Principal, display_prefix, generate_secret, hash_token};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::state::AppState;
use crate::store::NewEnrollmentToken;
use crate::views::{
    EnrollmentTokenCreated, EnrollmentTokenEnvelope, EnrollmentTokenList, EnrollmentTokenView,
    ListMeta, NodeRevoked,
};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;

/// Executors one enrolment token may enrol, at most.
pub const MAX_USES: u32 = 10_000;
const DEFAULT_LIFETIME: &str = "24h";

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnrollmentToken {
    /// What the token is for, e.g. `rack-3`.
    pub name: String,
    /// How many executors may enrol with it (1 by default, at most 10000).
    #[serde(default)]
    pub uses: Option<u32>,
    /// Lifetime in human form (`1h`, `7d`); 24 hours when absent.
    #[serde(default)]
    pub expires_in: Option<String>,
    /// The one node it may enrol. Only such a token enrols a node whose credential was revoked.
    #[serde(default)]
    pub node: Option<String>,
}

/// Mint an enrolment token (cluster administrators).
#[utoipa::path(
    post, path = "/api/v1/enrollment-tokens", tag = "nodes", request_body = CreateEnrollmentToken,
    responses((status = 201, body = EnrollmentTokenCreated), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateEnrollmentToken>,
) -> ApiResult<(StatusCode, Json<EnrollmentTokenCreated>)> {
    principal.require_cluster_admin()?;
    if body.name.trim().is_empty() || body.name.len() > 128 {
        return Err(ApiError::invalid("name", "must be 1-128 characters"));
    }
    let uses = body.uses.unwrap_or(1);
    if !(1..=MAX_USES).contains(&uses) {
        return Err(ApiError::invalid(
            "uses",
            format!("must be between 1 and {MAX_USES}"),
        ));
    }
    let expires_at = expiry(body.expires_in.as_deref().unwrap_or(DEFAULT_LIFETIME))?;
    if let Some(node) = &body.node {
        crate::cluster::validate_node_name(node)
            .map_err(|status| ApiError::invalid("node", status.message()))?;
    }
    let secret = generate_secret(ENROLLMENT_PREFIX);
    let token = state
        .store
        .create_enrollment_token(&NewEnrollmentToken {
            name: body.name,
            token_hash: hash_token(&secret),
            prefix: display_prefix(&secret),
            uses,
            created_by: principal.user.id,
            expires_at: Some(expires_at),
            node_name: body.node,
        })
        .await?;
    tracing::info!(enrollment_token.id = %token.id, uses, user.id = %principal.user.id, "enrolment token created");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::EnrollmentTokenCreate,
        format!("enrolment token {} ({})", token.id, token.name),
        format!(
            "{uses} use(s){}",
            token
                .node_name
                .as_deref()
                .map(|n| format!(", for node {n}"))
                .unwrap_or_default()
        ),
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(EnrollmentTokenCreated {
            enrollment_token: token.into(),
            secret,
        }),
    ))
}

/// List enrolment tokens, without their secrets (cluster administrators).
#[utoipa::path(
    get, path = "/api/v1/enrollment-tokens", tag = "nodes",
    responses((status = 200, body = EnrollmentTokenList), (status = 403, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<EnrollmentTokenList>> {
    principal.require_cluster_admin()?;
    let tokens = state.store.list_enrollment_tokens().await?;
    Ok(Json(EnrollmentTokenList {
        enrollment_tokens: tokens.into_iter().map(EnrollmentTokenView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Revoke an enrolment token: no executor enrols with it any more (enrolled ones stay enrolled).
#[utoipa::path(
    delete, path = "/api/v1/enrollment-tokens/{id}", tag = "nodes",
    params(("id" = String, Path)),
    responses((status = 200, body = EnrollmentTokenEnvelope), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<EnrollmentTokenEnvelope>> {
    principal.require_cluster_admin()?;
    let not_found = || format!("no enrolment token `{id}`");
    let parsed: uuid::Uuid = id.parse().map_err(|_| ApiError::not_found(not_found()))?;
    let token = state
        .store
        .revoke_enrollment_token(parsed)
        .await
        .map_err(|err| ApiError::from_store(err, not_found))?;
    tracing::info!(enrollment_token.id = %token.id, user.id = %principal.user.id, "enrolment token revoked");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::EnrollmentTokenRevoke,
        format!("enrolment token {} ({})", token.id, token.name),
        "",
    )
    .await;
    Ok(Json(EnrollmentTokenEnvelope {
        enrollment_token: token.into(),
    }))
}

/// Revoke a node's credential and end its executor's session; its jobs are rescheduled once its
/// heartbeat timeout passes. The executor must enrol again, with a new enrolment token.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/revoke", tag = "nodes",
    params(("name" = String, Path)),
    responses((status = 200, body = NodeRevoked), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn revoke_node(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeRevoked>> {
    principal.require_cluster_admin()?;
    let revoked = state.store.revoke_node_credentials(&name).await?;
    let disconnected = match &state.runtime {
        Some(runtime) => {
            let connected = runtime.hub.connected().contains_key(&name);
            runtime.hub.kick(&name);
            runtime.hub.wake.notify_one();
            connected
        }
        None => false,
    };
    if revoked == 0 && !disconnected && state.store.get_node(&name).await.is_err() {
        return Err(ApiError::not_found(format!("no node `{name}`")));
    }
    tracing::warn!(node.name = name, revoked, disconnected, user.id = %principal.user.id, "node credential revoked");
    crate::audit::record(
        state.store.as_ref(),
        &principal,
        crate::audit::Action::NodeRevoke,
        &name,
        format!("{revoked} credential(s) revoked"),
    )
    .await;
    Ok(Json(NodeRevoked {
        node: name,
        revoked_credentials: revoked,
        disconnected,
    }))
}
