//! How executors come to be trusted and stop being trusted (cluster administrators only): enrolment
//! tokens, which an executor exchanges for its node's credential (`drover_runtime`'s enrolment), and
//! revoking a node's credentials, which ends its session.

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use crate::tokens::expiry;
use drover_store::tokens::{ENROLLMENT_PREFIX, display_prefix, generate_secret, hash_token};
use drover_store::{EnrollmentToken, NewEnrollmentToken};

/// Executors one enrolment token may enrol, at most.
pub const MAX_USES: u32 = 10_000;
const DEFAULT_LIFETIME: &str = "24h";

/// What a new enrolment token is.
#[derive(Debug, Clone)]
pub struct NewEnrollmentRequest {
    pub name: String,
    /// Executors it may enrol (1 when `None`).
    pub uses: Option<u32>,
    /// Its lifetime (`24h` when `None`).
    pub expires_in: Option<String>,
    /// The one node name it enrols, if any.
    pub node: Option<String>,
}

/// Mints an enrolment token; returns it with its secret, shown this once.
pub async fn create(
    service: &Service,
    principal: &Principal,
    request: NewEnrollmentRequest,
) -> ServiceResult<(EnrollmentToken, String)> {
    principal.require_cluster_admin()?;
    if request.name.trim().is_empty() || request.name.chars().count() > 128 {
        return Err(ServiceError::invalid("name", "must be 1-128 characters"));
    }
    let uses = request.uses.unwrap_or(1);
    if !(1..=MAX_USES).contains(&uses) {
        return Err(ServiceError::invalid(
            "uses",
            format!("must be between 1 and {MAX_USES}"),
        ));
    }
    let expires_at = expiry(request.expires_in.as_deref().unwrap_or(DEFAULT_LIFETIME))?;
    if let Some(node) = &request.node {
        drover_runtime::validate_node_name(node)
            .map_err(|status| ServiceError::invalid("node", status.message()))?;
    }
    let secret = generate_secret(ENROLLMENT_PREFIX);
    let token = service
        .store
        .create_enrollment_token(&NewEnrollmentToken {
            name: request.name,
            token_hash: hash_token(&secret),
            prefix: display_prefix(&secret),
            uses,
            created_by: principal.user.id,
            expires_at: Some(expires_at),
            node_name: request.node,
        })
        .await?;
    tracing::info!(enrollment_token.id = %token.id, uses, user.id = %principal.user.id, "enrolment token created");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::EnrollmentTokenCreate,
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
    Ok((token, secret))
}

pub async fn list(service: &Service, principal: &Principal) -> ServiceResult<Vec<EnrollmentToken>> {
    principal.require_cluster_admin()?;
    Ok(service.store.list_enrollment_tokens().await?)
}

/// Revokes enrolment token `id` (as a path gives it).
pub async fn revoke(
    service: &Service,
    principal: &Principal,
    id: &str,
) -> ServiceResult<EnrollmentToken> {
    principal.require_cluster_admin()?;
    let not_found = || format!("no enrolment token `{id}`");
    let parsed: uuid::Uuid = id
        .parse()
        .map_err(|_| ServiceError::not_found(not_found()))?;
    let token = service
        .store
        .revoke_enrollment_token(parsed)
        .await
        .map_err(|err| ServiceError::from_store(err, not_found))?;
    tracing::info!(enrollment_token.id = %token.id, user.id = %principal.user.id, "enrolment token revoked");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::EnrollmentTokenRevoke,
        format!("enrolment token {} ({})", token.id, token.name),
        "",
    )
    .await;
    Ok(token)
}

/// The certificate authority the executor gateway's certificates are issued by, which executors
/// trust the gateway by: its certificate (PEM) and its pin (`sha256:HEX`). Any signed-in caller:
/// it is no secret.
pub fn gateway_authority(
    service: &Service,
    _principal: &Principal,
) -> ServiceResult<(String, String)> {
    let tls = service
        .runtime
        .as_ref()
        .and_then(|runtime| runtime.config.gateway_tls.as_ref())
        .ok_or_else(|| {
            ServiceError::not_found(
                "this server's executor gateway does not use TLS (it runs no gateway, or was started with --gateway-plaintext)",
            )
        })?;
    Ok((
        tls.authority.certificate_pem().to_owned(),
        tls.authority.pin(),
    ))
}

/// What revoking a node did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRevocation {
    /// Credentials revoked.
    pub revoked: u64,
    /// Whether its executor's session was ended.
    pub disconnected: bool,
}

/// Revokes node `name`'s credentials and ends its executor's session.
pub async fn revoke_node(
    service: &Service,
    principal: &Principal,
    name: &str,
) -> ServiceResult<NodeRevocation> {
    principal.require_cluster_admin()?;
    let revoked = service.store.revoke_node_credentials(name).await?;
    let disconnected = match &service.runtime {
        Some(runtime) => {
            let connected = runtime.hub.connected().contains_key(name);
            runtime.hub.kick(name);
            runtime.hub.wake.notify_one();
            connected
        }
        None => false,
    };
    if revoked == 0 && !disconnected && service.store.get_node(name).await.is_err() {
        return Err(ServiceError::not_found(format!("no node `{name}`")));
    }
    tracing::warn!(node.name = name, revoked, disconnected, user.id = %principal.user.id, "node credential revoked");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::NodeRevoke,
        name,
        format!("{revoked} credential(s) revoked"),
    )
    .await;
    Ok(NodeRevocation {
        revoked,
        disconnected,
    })
}
