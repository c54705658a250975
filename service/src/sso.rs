//! Single sign-on with the company's OpenID Connect provider (issue #56), below HTTP: starting and
//! finishing a dashboard sign-in (authorization code with PKCE, `state` spent once, `nonce`
//! checked), the CLI's exchange of an ID token from the device flow for a short-lived Drover token,
//! and the sweep that refreshes open sessions at the provider. Each of them brings the identity's
//! Drover users in line with its groups ([`reconcile`]): a user is created in each tenant the
//! groups map to on first sign-in, its role follows the groups, and when a group goes away the user
//! loses that tenant and every token it held. The provider itself — discovery, keys, token
//! verification — is [`provider`]; the group mapping, a pure function, [`grants`].

pub mod config;
pub mod grants;
pub mod provider;

use crate::Service;
use crate::error::{ErrorKind, ServiceError, ServiceResult};
use chrono::{DateTime, SubsecRound, Utc};
pub use config::{SsoConfig, SsoDescription};
use drover_core::{TenantId, TokenId};
use drover_store::audit::Action;
use drover_store::{
    NewAuditEvent, NewSsoLogin, NewToken, NewUser, SsoSession, StoreError, User, tokens,
};
pub use provider::Sso;
use provider::{Audience, Identity, ProviderError};
use std::time::Duration;

/// How long a browser has between being sent to the provider and coming back.
const LOGIN_TTL_MINUTES: i64 = 10;
/// How long a dashboard session lasts at most, refreshed or not.
pub const SESSION_HOURS: i64 = 12;
/// Sessions one sweep refreshes at most (the rest wait for the next sweep).
const SWEEP_BATCH: u32 = 200;

fn sso(service: &Service) -> ServiceResult<&Sso> {
    service.sso.as_deref().ok_or_else(|| {
        ServiceError::not_found("single sign-on is not configured on this server (--oidc-issuer)")
    })
}

impl From<ProviderError> for ServiceError {
    fn from(err: ProviderError) -> Self {
        match err {
            ProviderError::Unavailable(_) => {
                tracing::warn!(error = %err, "identity provider");
                ServiceError::new(
                    ErrorKind::Unavailable,
                    "provider_unavailable",
                    err.to_string(),
                )
            }
            ProviderError::Refused(_) | ProviderError::BadToken(_) => {
                tracing::info!(error = %err, "single sign-on refused");
                ServiceError::unauthenticated(err.to_string())
            }
        }
    }
}

/// The refresh token's seal: the cluster's own secret (the nil tenant), named for its session.
fn sealed_as(token: TokenId) -> String {
    format!("sso-session/{}", token.0)
}

/// Starts a dashboard sign-in that lands on `next` afterwards: the URL to send the browser to.
pub async fn begin(service: &Service, next: &str) -> ServiceResult<String> {
    let sso = sso(service)?;
    let (url, state, nonce, pkce_verifier) = sso.provider.authorization().await?;
    service
        .store
        .begin_sso_login(&NewSsoLogin {
            state_hash: tokens::hash_token(&state),
            nonce,
            pkce_verifier,
            next: next.to_owned(),
            expires_at: Utc::now() + chrono::Duration::minutes(LOGIN_TTL_MINUTES),
        })
        .await?;
    Ok(url)
}

/// A dashboard session opened through the provider.
#[derive(Debug)]
pub struct SignedIn {
    /// The session's own token, for the cookie.
    pub token: String,
    pub expires_at: DateTime<Utc>,
    /// Where the browser asked to land.
    pub next: String,
    pub user: User,
}

/// Finishes a dashboard sign-in from the provider's callback: the `state` must be one this cluster
/// sent and not spent, the code is exchanged (with the PKCE verifier), the ID token verified (with
/// the nonce), and the identity's users brought in line with its groups.
pub async fn finish(service: &Service, state: &str, code: &str) -> ServiceResult<SignedIn> {
    let sso = sso(service)?;
    let Some(login) = service
        .store
        .take_sso_login(&tokens::hash_token(state))
        .await?
    else {
        return Err(ServiceError::unauthenticated(
            "this sign-in was already used or never started here; sign in again",
        ));
    };
    if login.expires_at < Utc::now() {
        return Err(ServiceError::unauthenticated(
            "the sign-in took too long; sign in again",
        ));
    }
    let answer = sso
        .provider
        .exchange_code(code, &login.pkce_verifier)
        .await?;
    let identity = sso
        .provider
        .verify(&answer.id_token, Audience::Dashboard, Some(&login.nonce))
        .await?;
    let user = first_user(reconcile(service, &identity).await?, &identity)?;
    let secrets = service.secrets.as_ref().ok_or_else(|| {
        tracing::error!("single sign-on needs the server key to seal refresh tokens");
        ServiceError::internal()
    })?;
    let token = tokens::generate_token();
    let now = Utc::now();
    let expires_at = now + chrono::Duration::hours(SESSION_HOURS);
    let created = service
        .store
        .create_token(&NewToken {
            user_id: user.id,
            name: "dashboard session (single sign-on)".to_owned(),
            token_hash: tokens::hash_token(&token),
            prefix: tokens::display_prefix(&token),
            expires_at: Some(expires_at),
            parent: None,
        })
        .await?;
    let refresh = answer.refresh_token.as_ref().map(|refresh| {
        secrets.seal(
            TenantId(uuid::Uuid::nil()),
            &sealed_as(created.id),
            refresh.as_bytes(),
        )
    });
    service
        .store
        .keep_sso_session(&SsoSession {
            token_id: created.id,
            user_id: user.id,
            issuer: identity.issuer.clone(),
            subject: identity.subject.clone(),
            refresh,
            refresh_due: now + refresh_every(sso),
        })
        .await?;
    tracing::info!(user.id = %user.id, tenant = %user.tenant_name, "dashboard session started through single sign-on");
    Ok(SignedIn {
        token,
        expires_at,
        next: login.next,
        user,
    })
}

fn refresh_every(sso: &Sso) -> chrono::Duration {
    chrono::Duration::from_std(sso.config().refresh_every).unwrap_or(chrono::Duration::minutes(5))
}

fn first_user(users: Vec<User>, identity: &Identity) -> ServiceResult<User> {
    users.into_iter().next().ok_or_else(|| {
        ServiceError::forbidden(format!(
            "signed in as `{}`, but none of your groups gives access to a tenant here; ask an administrator to map one (--oidc-group-map)",
            identity.name
        ))
    })
}

/// A Drover token the CLI got for an ID token of the device flow.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Exchanged {
    /// A Drover API token (`drv_…`); shown once.
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub tenant: String,
    pub user: String,
}

/// The CLI's sign-in: an ID token its public client got (device flow, or a refresh), verified, for
/// a Drover token that lives as long as a session goes between refreshes; the CLI exchanges again
/// (after refreshing at the provider) when it runs out, so a group taken away ends its access too.
pub async fn exchange(service: &Service, id_token: &str) -> ServiceResult<Exchanged> {
    let sso = sso(service)?;
    let identity = sso
        .provider
        .verify(id_token, Audience::Cli, None)
        .await
        .map_err(|err| ServiceError::from(err).with_field("id_token"))?;
    let user = first_user(reconcile(service, &identity).await?, &identity)?;
    let token = tokens::generate_token();
    let expires_at = Utc::now() + refresh_every(sso);
    service
        .store
        .create_token(&NewToken {
            user_id: user.id,
            name: "cli (single sign-on)".to_owned(),
            token_hash: tokens::hash_token(&token),
            prefix: tokens::display_prefix(&token),
            expires_at: Some(expires_at),
            parent: None,
        })
        .await?;
    tracing::info!(user.id = %user.id, tenant = %user.tenant_name, "CLI signed in through single sign-on");
    Ok(Exchanged {
        token,
        expires_at,
        tenant: user.tenant_name,
        user: user.name,
    })
}

fn sso_event(
    identity: &Identity,
    tenant: Option<TenantId>,
    action: Action,
    target: String,
    detail: String,
) -> NewAuditEvent {
    NewAuditEvent {
        actor_id: None,
        actor: format!("sso:{}", identity.issuer),
        tenant_id: tenant,
        action: action.as_str(),
        target,
        detail,
    }
}

/// Brings the identity's Drover users in line with its groups: a user in each tenant they map to
/// (created on first sight, its role following the groups), and none elsewhere (a tenant no longer
/// given loses the user's link and every token it held). Returns the users in the mapping's order.
pub async fn reconcile(service: &Service, identity: &Identity) -> ServiceResult<Vec<User>> {
    let sso = sso(service)?;
    let config = sso.config();
    let grants = grants::grants(&config.group_map, &identity.groups);
    let cluster_admin = config
        .admin_group
        .as_ref()
        .is_some_and(|group| identity.groups.contains(group));
    let store = service.store.as_ref();
    let mut tenants = Vec::with_capacity(grants.len());
    for grant in &grants {
        match store.get_tenant_by_name(&grant.tenant).await {
            Ok(tenant) => tenants.push((tenant, grant.role)),
            Err(StoreError::NotFound) => {
                tracing::warn!(tenant = %grant.tenant, "--oidc-group-map names a tenant that does not exist; skipped");
            }
            Err(err) => return Err(err.into()),
        }
    }
    let mut changed = false;
    // Read once: the unlinks below drop only tenants no longer given, which the loop after skips.
    let links = store.sso_links(&identity.issuer, &identity.subject).await?;
    for link in &links {
        if tenants
            .iter()
            .any(|(tenant, _)| tenant.id == link.tenant_id)
        {
            continue;
        }
        if let Some(user) = store
            .unlink_sso_user(&identity.issuer, &identity.subject, link.tenant_id)
            .await?
        {
            changed = true;
            tracing::info!(user.id = %user, "single sign-on: the groups no longer give this tenant; the user's tokens are revoked");
            drover_store::audit::write(
                store,
                &sso_event(
                    identity,
                    Some(link.tenant_id),
                    Action::SsoUnlink,
                    identity.name.clone(),
                    format!(
                        "user {} lost the tenant with the groups that gave it",
                        user.0
                    ),
                ),
            )
            .await;
        }
    }
    let mut users = Vec::with_capacity(tenants.len());
    for (tenant, role) in tenants {
        let user = match links.iter().find(|link| link.tenant_id == tenant.id) {
            Some(link) => {
                let user = store
                    .get_user(drover_store::Scope::Cluster, link.user_id)
                    .await?;
                if user.role != role || user.cluster_admin != cluster_admin {
                    changed = true;
                    drover_store::audit::write(
                        store,
                        &sso_event(
                            identity,
                            Some(tenant.id),
                            Action::SsoRole,
                            format!("{}/{}", tenant.name, user.name),
                            format!(
                                "role {} -> {role}{}",
                                user.role,
                                if cluster_admin {
                                    ", cluster administrator"
                                } else {
                                    ""
                                }
                            ),
                        ),
                    )
                    .await;
                    store.set_user_role(user.id, role, cluster_admin).await?
                } else {
                    user
                }
            }
            None => {
                link_new_user(
                    service,
                    identity,
                    tenant.id,
                    &tenant.name,
                    role,
                    cluster_admin,
                )
                .await?
            }
        };
        users.push(user);
    }
    if changed {
        service.tokens.forget_all();
    }
    Ok(users)
}

/// Creates the identity's user in a tenant. The name is the identity's, made Drover-safe; when a
/// user of that name exists already (a token user, or another identity), a suffix from the subject
/// tells them apart: an identity never takes over an existing user.
async fn link_new_user(
    service: &Service,
    identity: &Identity,
    tenant: TenantId,
    tenant_name: &str,
    role: drover_core::Role,
    cluster_admin: bool,
) -> ServiceResult<User> {
    let store = service.store.as_ref();
    let base = safe_name(&identity.name);
    let suffix: String = hex_digest(&format!("{}\n{}", identity.issuer, identity.subject))
        .chars()
        .take(8)
        .collect();
    for name in [base.clone(), format!("{}-{suffix}", truncate(&base, 55))] {
        let new = NewUser {
            tenant_id: tenant,
            name: name.clone(),
            role,
            cluster_admin,
        };
        match store
            .link_sso_user(&identity.issuer, &identity.subject, &new)
            .await
        {
            Ok(user) => {
                drover_store::audit::write(
                    store,
                    &sso_event(
                        identity,
                        Some(tenant),
                        Action::SsoLink,
                        format!("{tenant_name}/{}", user.name),
                        format!(
                            "role {role}{}",
                            if cluster_admin {
                                ", cluster administrator"
                            } else {
                                ""
                            }
                        ),
                    ),
                )
                .await;
                tracing::info!(user.id = %user.id, tenant = %tenant_name, "single sign-on created a user");
                return Ok(user);
            }
            Err(StoreError::Conflict { field: "name", .. }) => continue,
            // Another replica linked the identity first: use its user.
            Err(StoreError::Conflict {
                field: "subject", ..
            }) => {
                let links = store.sso_links(&identity.issuer, &identity.subject).await?;
                if let Some(link) = links.iter().find(|link| link.tenant_id == tenant) {
                    return Ok(store
                        .get_user(drover_store::Scope::Cluster, link.user_id)
                        .await?);
                }
                return Err(ServiceError::conflict(
                    "conflict",
                    "signing in raced another sign-in; try again",
                ));
            }
            Err(err) => return Err(err.into()),
        }
    }
    Err(ServiceError::conflict(
        "name_taken",
        format!(
            "users named `{base}` already exist in tenant `{tenant_name}`; an administrator must rename one"
        ),
    ))
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// A user name Drover accepts (letters, digits, `.`, `_`, `-`, `@`; 1-64) from whatever the
/// provider calls the person.
fn safe_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "sso-user".to_owned()
    } else {
        cleaned
    }
}

fn hex_digest(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Refreshes the sessions due: each is taken by one replica, refreshed at the provider, its new ID
/// token verified and its groups applied. A provider that refuses (a revoked refresh token, a user
/// disabled) or a token that fails verification ends the session; a provider that cannot be
/// reached is tried again at the next sweep. Returns how many sessions ended.
pub async fn refresh_due(service: &Service) -> ServiceResult<usize> {
    let sso = sso(service)?;
    let now = Utc::now();
    let due = service.store.due_sso_sessions(now, SWEEP_BATCH).await?;
    let mut ended = 0;
    for session in due {
        // To the microsecond, as the databases keep it: the claim below compares it.
        let next = (now + refresh_every(sso)).trunc_subsecs(6);
        if !service
            .store
            .claim_sso_session(session.token_id, session.refresh_due, next)
            .await?
        {
            continue;
        }
        match refresh_one(service, sso, &session).await {
            Ok(true) => {}
            Ok(false) => ended += 1,
            Err(err) if err.kind == ErrorKind::Unavailable => {
                // Try again soon rather than end everyone's session over a provider's blip.
                let soon = Utc::now() + chrono::Duration::seconds(30).min(refresh_every(sso));
                let _ = service
                    .store
                    .claim_sso_session(session.token_id, next, soon)
                    .await;
            }
            Err(err) => {
                tracing::info!(token.id = %session.token_id, error = %err, "single sign-on session ended: its refresh failed");
                service.store.end_sso_session(session.token_id).await?;
                service.tokens.forget_all();
                ended += 1;
            }
        }
    }
    Ok(ended)
}

/// One session's refresh: `Ok(false)` when it ended (no refresh token, or the user lost the tenant).
async fn refresh_one(service: &Service, sso: &Sso, session: &SsoSession) -> ServiceResult<bool> {
    let secrets = service
        .secrets
        .as_ref()
        .ok_or_else(ServiceError::internal)?;
    let Some(sealed) = &session.refresh else {
        tracing::info!(token.id = %session.token_id, "single sign-on session ended: the provider gave no refresh token");
        service.store.end_sso_session(session.token_id).await?;
        service.tokens.forget_all();
        return Ok(false);
    };
    let refresh = secrets
        .open(
            TenantId(uuid::Uuid::nil()),
            &sealed_as(session.token_id),
            sealed,
        )
        .map_err(|err| {
            tracing::error!(error = %err, "cannot open a session's refresh token");
            ServiceError::unauthenticated("the session's refresh token cannot be opened")
        })?;
    let refresh = String::from_utf8(refresh).map_err(|_| ServiceError::internal())?;
    let answer = sso.provider.refresh(&refresh).await?;
    let identity = sso
        .provider
        .verify(&answer.id_token, Audience::Dashboard, None)
        .await?;
    if identity.subject != session.subject || identity.issuer != session.issuer {
        return Err(ServiceError::unauthenticated(
            "the provider's refresh named another subject",
        ));
    }
    let users = reconcile(service, &identity).await?;
    if !users.iter().any(|user| user.id == session.user_id) {
        // The unlink revoked the session's token already.
        service.store.end_sso_session(session.token_id).await?;
        service.tokens.forget_all();
        return Ok(false);
    }
    if let Some(rotated) = answer.refresh_token.filter(|new| *new != refresh) {
        let sealed = secrets.seal(
            TenantId(uuid::Uuid::nil()),
            &sealed_as(session.token_id),
            rotated.as_bytes(),
        );
        service
            .store
            .set_sso_refresh(session.token_id, Some(&sealed))
            .await?;
    }
    Ok(true)
}

/// Refreshes due sessions every `every` until the server stops.
pub async fn run_sweeper(service: Service, every: Duration) {
    let mut stopping = service.stopping.clone();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
        if let Err(err) = refresh_due(&service).await {
            tracing::warn!(error = %err, "single sign-on: refreshing sessions failed; trying again");
        }
    }
}
