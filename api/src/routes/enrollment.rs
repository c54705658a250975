//! `/api/v1/enrollment-tokens` and `POST /api/v1/nodes/{name}/revoke`: how executors come to be trusted
//! and stop being trusted. Cluster administrators only. An enrolment token is exchanged by an executor
//! for its node's credential (`drover_runtime`'s enrolment); revoking a node's credential ends its session.

use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiJson, PathParam};
use crate::paging::ListMeta;
use crate::state::AppState;
use crate::views::{
    EnrollmentTokenCreated, EnrollmentTokenEnvelope, EnrollmentTokenList, EnrollmentTokenView,
    GatewayAuthority, NodeRevoked,
};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_service::auth::Principal;
use drover_service::enrollment;
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnrollmentToken {
    /// What the token is for, e.g. `rack-3`.
    #[schema(schema_with = super::tokens::token_name)]
    pub name: String,
    /// How many executors may enrol with it (1 by default, at most 10000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    pub uses: Option<u32>,
    #[serde(default)]
    #[schema(schema_with = enrollment_lifetime)]
    pub expires_in: Option<String>,
    /// The one node it may enrol: 1 to 253 letters, digits, `-`, `.` and `_`. Only such a token
    /// enrols a node whose credential was revoked.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,253}$")]
    pub node: Option<String>,
}

fn enrollment_lifetime() -> utoipa::openapi::schema::Schema {
    super::tokens::lifetime(
        "Lifetime in human form (`1h`, `7d`), 1 s to 10 years; 24 hours when absent or `null`.",
    )
}

/// Mint an enrolment token (cluster administrators).
#[utoipa::path(
    post, path = "/api/v1/enrollment-tokens", tag = "nodes", request_body = CreateEnrollmentToken,
    responses((status = 201, body = EnrollmentTokenCreated),
              (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody),
              (status = 422, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateEnrollmentToken>,
) -> ApiResult<(StatusCode, Json<EnrollmentTokenCreated>)> {
    let (token, secret) = enrollment::create(
        &state,
        &principal,
        enrollment::NewEnrollmentRequest {
            name: body.name,
            uses: body.uses,
            expires_in: body.expires_in,
            node: body.node,
        },
    )
    .await?;
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
    responses((status = 200, body = EnrollmentTokenList), (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<EnrollmentTokenList>> {
    let tokens = enrollment::list(&state, &principal).await?;
    Ok(Json(EnrollmentTokenList {
        enrollment_tokens: tokens.into_iter().map(EnrollmentTokenView::from).collect(),
        meta: ListMeta { next_cursor: None },
    }))
}

/// Revoke an enrolment token: no executor enrols with it any more (enrolled ones stay enrolled).
#[utoipa::path(
    delete, path = "/api/v1/enrollment-tokens/{id}", tag = "nodes",
    params(("id" = String, Path, format = Uuid, description = "The enrolment token's id")),
    responses((status = 200, body = EnrollmentTokenEnvelope),
              (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody),
              (status = 404, description = "No such enrolment token (a malformed id is none)", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> ApiResult<Json<EnrollmentTokenEnvelope>> {
    let token = enrollment::revoke(&state, &principal, &id).await?;
    Ok(Json(EnrollmentTokenEnvelope {
        enrollment_token: token.into(),
    }))
}

/// The certificate authority the executor gateway's certificates are issued by (any signed-in
/// caller): executors trust the gateway by it (`--gateway-ca` or `--gateway-ca-hash`).
#[utoipa::path(
    get, path = "/api/v1/gateway-authority", tag = "nodes",
    responses((status = 200, body = GatewayAuthority),
              (status = 404, description = "The gateway does not use TLS", body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn gateway_authority(
    State(state): State<AppState>,
    principal: Principal,
) -> ApiResult<Json<GatewayAuthority>> {
    let (certificate, pin) = enrollment::gateway_authority(&state, &principal)?;
    Ok(Json(GatewayAuthority { certificate, pin }))
}

/// Revoke a node's credential and end its executor's session; its jobs are rescheduled once its
/// heartbeat timeout passes. The executor must enrol again, with a new enrolment token.
#[utoipa::path(
    post, path = "/api/v1/nodes/{name}/revoke", tag = "nodes",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9._-]{1,253}$", description = "The node's name")),
    responses((status = 200, body = NodeRevoked),
              (status = 403, description = "Anyone but a cluster administrator", body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn revoke_node(
    State(state): State<AppState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> ApiResult<Json<NodeRevoked>> {
    let revocation = enrollment::revoke_node(&state, &principal, &name).await?;
    Ok(Json(NodeRevoked {
        node: name,
        revoked_credentials: revocation.revoked,
        disconnected: revocation.disconnected,
    }))
}
