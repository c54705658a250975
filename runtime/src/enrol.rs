//! Trusting executors. An executor enrols once: it presents an enrolment token (minted by a cluster
//! administrator, or the server's configured one) and a node name, and receives a credential for that
//! node, which it keeps. Every session then presents the credential, and may speak only as its node.
//! A node name with a live credential cannot be enrolled again until an administrator revokes it, so
//! a leaked enrolment token cannot be used to impersonate an enrolled node.

use super::Runtime;
use drover_proto as pb;
use drover_store::tokens::{NODE_CREDENTIAL_PREFIX, display_prefix, generate_secret, hash_token};
use drover_store::{EnrolWith, Enrolment, NewNodeCredential};
use sha2::{Digest, Sha256};
use tonic::Status;

/// A node name as executors give it: what `Register` and `Enroll` accept.
pub fn validate_node_name(name: &str) -> Result<(), Status> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if valid {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "node_name `{}`: 1 to 253 letters, digits, `-`, `.` or `_`",
            name.escape_debug()
        )))
    }
}

/// The bearer value of a request's `authorization` metadata.
fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Exchanges an enrolment token for a node credential.
pub(super) async fn enroll(
    runtime: &Runtime,
    request: &pb::EnrollRequest,
) -> Result<pb::EnrollResponse, Status> {
    validate_node_name(&request.node_name)?;
    // Refused enrolments are few and slow (per replica: bursts of 20, then one a second), so
    // nobody guesses tokens at speed.
    if !runtime
        .failed_enrolments
        .has_one(&(), std::time::Instant::now())
    {
        return Err(Status::resource_exhausted(
            "too many refused enrolments lately; retry in a few seconds",
        ));
    }
    let given = request.enrollment_token.trim();
    // The configured token is compared as digests, so the time taken says nothing about it.
    let with_server = runtime
        .config
        .enrollment_token
        .as_deref()
        .is_some_and(|expected| Sha256::digest(given) == Sha256::digest(expected));
    let hash = hash_token(given);
    let with = if with_server {
        EnrolWith::Server
    } else {
        EnrolWith::Token(&hash)
    };
    let secret = generate_secret(NODE_CREDENTIAL_PREFIX);
    let credential = NewNodeCredential {
        node_name: request.node_name.clone(),
        credential_hash: hash_token(&secret),
        prefix: display_prefix(&secret),
    };
    let outcome = runtime.store.enroll_node(with, &credential).await.map_err(|err| {
        tracing::error!(node.name = request.node_name, error = %err, "cannot record an enrolment");
        Status::unavailable("the server cannot record the enrolment; retry")
    })?;
    match outcome {
        Enrolment::Enrolled(record) => {
            tracing::info!(
                node.name = record.node_name,
                enrolled_with = record.enrolled_with,
                "executor enrolled"
            );
            drover_store::audit::write(
                runtime.store.as_ref(),
                &drover_store::audit::enrolment_event(&record.node_name, &record.enrolled_with),
            )
            .await;
            Ok(pb::EnrollResponse {
                node_name: record.node_name,
                credential: secret,
            })
        }
        Enrolment::TokenRefused => {
            runtime
                .failed_enrolments
                .take_one(&(), std::time::Instant::now())
                .ok();
            tracing::warn!(
                node.name = request.node_name,
                "refused an enrolment: unknown, expired, revoked or used-up token"
            );
            Err(Status::unauthenticated(
                "the enrolment token is unknown, expired, revoked, used up or minted for another node: ask a cluster administrator for one (drover enrollment-token create)",
            ))
        }
        Enrolment::NameRevoked => {
            tracing::warn!(
                node.name = request.node_name,
                "refused an enrolment: the node was revoked"
            );
            Err(Status::permission_denied(format!(
                "node `{}` was revoked: only an enrolment token minted for it enrols it again (drover enrollment-token create NAME --node {})",
                request.node_name, request.node_name
            )))
        }
        Enrolment::NameTaken => {
            tracing::warn!(
                node.name = request.node_name,
                "refused an enrolment: the node is enrolled already"
            );
            Err(Status::already_exists(format!(
                "node `{}` is enrolled already: keep the executor's data directory (it holds the node's credential), or revoke the node first (drover node revoke {})",
                request.node_name, request.node_name
            )))
        }
    }
}

/// Whether the credential with this hash is still live (checked again once a session is
/// connected, so a revocation between the first check and the connection is not missed).
pub(super) async fn credential_live(runtime: &Runtime, hash: &[u8; 32]) -> Result<bool, Status> {
    match runtime.store.find_node_credential(hash).await {
        Ok(record) => Ok(record.is_some_and(|r| r.revoked_at.is_none())),
        Err(err) => {
            tracing::error!(error = %err, "cannot look up a node credential");
            Err(Status::unavailable(
                "the server cannot check credentials now; retry",
            ))
        }
    }
}

/// The node a session's credential was issued for, and the credential's hash.
pub(super) async fn authenticate_node(
    runtime: &Runtime,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<(String, [u8; 32]), Status> {
    let Some(secret) = bearer(metadata) else {
        return Err(Status::unauthenticated(
            "no node credential: enrol this executor first (--enrollment-token)",
        ));
    };
    let hash = hash_token(secret);
    let record = runtime
        .store
        .find_node_credential(&hash)
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "cannot look up a node credential");
            Status::unavailable("the server cannot check credentials now; retry")
        })?;
    match record {
        Some(record) if record.revoked_at.is_none() => Ok((record.node_name, hash)),
        Some(record) => {
            tracing::warn!(
                node.name = record.node_name,
                "refused a session with a revoked credential"
            );
            Err(Status::unauthenticated(format!(
                "the credential of node `{}` was revoked: enrol again with a new enrolment token",
                record.node_name
            )))
        }
        None => Err(Status::unauthenticated(
            "unknown node credential: enrol this executor (--enrollment-token)",
        )),
    }
}
