//! Trusting executors. An executor enrols once: it presents an enrolment token (minted by a cluster
//! administrator, or the server's configured one) and a node name, and receives a credential for that
//! node, which it keeps. Every session then presents the credential, and may speak only as its node.
//! A node name with a live credential cannot be enrolled again until an administrator revokes it, so
//! a leaked enrolment token cannot be used to impersonate an enrolled node.
//!
//! Where the gateway uses mutual TLS, enrolment also signs the executor's certificate request: the
//! certificate names the node and its credential, every session must present it (checked against
//! the credential the session presents), and the executor renews it with its credential.

use super::Runtime;
use drover_proto as pb;
use drover_store::tokens::{NODE_CREDENTIAL_PREFIX, display_prefix, generate_secret, hash_token};
use drover_store::{EnrolWith, Enrolment, NewNodeCredential};
use sha2::{Digest, Sha256};
use tonic::Status;
use uuid::Uuid;

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
    let signing = signing_request(runtime, &request.certificate_request)?;
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
            let (certificate, authority) = match &signing {
                Some((tls, signing)) => issue(tls, signing, &record.node_name, record.id)?,
                None => (String::new(), String::new()),
            };
            Ok(pb::EnrollResponse {
                node_name: record.node_name,
                credential: secret,
                certificate,
                authority,
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

/// The certificate request an enrolment or renewal carries, checked, where the gateway uses mutual
/// TLS (`None` where it does not: a request there is ignored).
fn signing_request<'a>(
    runtime: &'a Runtime,
    pem: &str,
) -> Result<
    Option<(
        &'a crate::tls::authority::GatewayTls,
        crate::tls::authority::SigningRequest,
    )>,
    Status,
> {
    let Some(tls) = runtime.config.gateway_tls.as_deref() else {
        return Ok(None);
    };
    if pem.trim().is_empty() {
        return Err(Status::invalid_argument(
            "certificate_request: required, as this gateway uses mutual TLS (an executor of this version sends one)",
        ));
    }
    let request = crate::tls::authority::SigningRequest::from_pem(pem)
        .map_err(|err| Status::invalid_argument(format!("certificate_request: {err}")))?;
    Ok(Some((tls, request)))
}

/// The node's client certificate and the authority's, both PEM.
fn issue(
    tls: &crate::tls::authority::GatewayTls,
    request: &crate::tls::authority::SigningRequest,
    node: &str,
    credential: Uuid,
) -> Result<(String, String), Status> {
    let certificate = tls
        .authority
        .issue_node(request, node, credential, tls.node_certificate_lifetime)
        .map_err(|err| {
            tracing::error!(node.name = node, error = %err, "cannot issue a node certificate");
            Status::internal("the server cannot issue the node's certificate")
        })?;
    Ok((certificate, tls.authority.certificate_pem().to_owned()))
}

/// A new client certificate for the node whose credential the request presents.
pub(super) async fn renew_certificate(
    runtime: &Runtime,
    request: &tonic::Request<pb::RenewCertificateRequest>,
) -> Result<pb::RenewCertificateResponse, Status> {
    let node = authenticate_node(runtime, request.metadata()).await?;
    let Some((tls, signing)) = signing_request(runtime, &request.get_ref().certificate_request)?
    else {
        return Err(Status::failed_precondition(
            "this gateway does not use mutual TLS: there is no certificate to renew",
        ));
    };
    // A connection presenting a certificate must present the node's own.
    if request.peer_certs().is_some() {
        check_certificate(runtime, request, &node)?;
    }
    let (certificate, authority) = issue(tls, &signing, &node.name, node.credential)?;
    tracing::info!(node.name = node.name, "renewed a node certificate");
    Ok(pb::RenewCertificateResponse {
        certificate,
        authority,
    })
}

/// Where the gateway uses mutual TLS: the session's client certificate must be the node's, issued
/// with the credential the session presents (a certificate of a revoked credential, or of another
/// node, is refused even though the authority signed it).
pub(super) fn check_certificate<T>(
    runtime: &Runtime,
    request: &tonic::Request<T>,
    node: &AuthenticatedNode,
) -> Result<(), Status> {
    if runtime.config.gateway_tls.is_none() {
        return Ok(());
    }
    let Some(certificates) = request.peer_certs() else {
        // Not `unauthenticated`: the credential is good, and the executor renews its certificate.
        return Err(Status::failed_precondition(
            "no client certificate: this gateway uses mutual TLS; the executor renews its certificate with its credential",
        ));
    };
    let identity = certificates
        .first()
        .and_then(crate::tls::authority::node_identity);
    match identity {
        Some(identity) if identity.node == node.name && identity.credential == node.credential => {
            Ok(())
        }
        _ => {
            tracing::warn!(
                node.name = node.name,
                "refused a session whose client certificate is not the node's current one"
            );
            Err(Status::permission_denied(format!(
                "the client certificate is not node `{}`'s for this credential (issued to another node, or before the node enrolled again)",
                node.name
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

/// The node a session's credential was issued for.
#[derive(Debug, Clone)]
pub(super) struct AuthenticatedNode {
    pub name: String,
    /// The credential's hash.
    pub hash: [u8; 32],
    /// The credential's id, which its node's client certificates name.
    pub credential: Uuid,
}

/// The node a session's credential was issued for.
pub(super) async fn authenticate_node(
    runtime: &Runtime,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<AuthenticatedNode, Status> {
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
        Some(record) if record.revoked_at.is_none() => Ok(AuthenticatedNode {
            name: record.node_name,
            hash,
            credential: record.id,
        }),
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
