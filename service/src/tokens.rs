//! API tokens: minted for the caller or for a user the caller manages (who holds less privilege),
//! never outliving the token that minted them, listed and revoked. The secret is returned once, at
//! creation; only its hash is kept (`drover_store::tokens`).

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use chrono::Utc;
use drover_core::{TokenId, UserId};
use drover_store::tokens::{display_prefix, generate_token, hash_token};
use drover_store::{NewToken, Scope, TokenInfo, User};

/// When a token given `expires_in` (`30d`, `12h`) expires: 1 s to 10 years from now.
pub fn expiry(raw: &str) -> ServiceResult<chrono::DateTime<Utc>> {
    let duration = humantime::parse_duration(raw).map_err(|err| {
        ServiceError::invalid("expires_in", format!("`{raw}` is not a duration ({err})"))
    })?;
    let duration = chrono::Duration::from_std(duration)
        .ok()
        .filter(|d| *d > chrono::Duration::zero() && *d <= chrono::Duration::days(3650))
        .ok_or_else(|| ServiceError::invalid("expires_in", "must be between 1s and 10 years"))?;
    Ok(Utc::now() + duration)
}

/// The user whose tokens the caller means: their own, or one they may manage tokens of.
async fn target_user(
    service: &Service,
    principal: &Principal,
    user_id: Option<UserId>,
) -> ServiceResult<UserId> {
    let Some(user_id) = user_id.filter(|id| *id != principal.user.id) else {
        return Ok(principal.user.id);
    };
    let user = service
        .store
        .get_user(Scope::Cluster, user_id)
        .await
        .map_err(|err| {
            ServiceError::from_store(err, || format!("no user `{user_id}`")).with_field("user_id")
        })?;
    if !principal.can_manage_users_of(user.tenant_id) {
        return Err(ServiceError::not_found(format!("no user `{user_id}`")).with_field("user_id"));
    }
    if !principal.may_manage_tokens_of(&user) {
        return Err(more_privileged(&user).with_field("user_id"));
    }
    Ok(user.id)
}

fn more_privileged(user: &User) -> ServiceError {
    ServiceError::forbidden(format!(
        "`{}` holds as much privilege as you or more: only a cluster administrator manages their tokens",
        user.name
    ))
}

/// Mints token `name` for `user_id` (the caller when `None`), expiring after `expires_in` if given
/// and never after the caller's own token. Returns it with its secret, shown this once.
pub async fn create(
    service: &Service,
    principal: &Principal,
    name: String,
    user_id: Option<UserId>,
    expires_in: Option<&str>,
) -> ServiceResult<(TokenInfo, String)> {
    if name.trim().is_empty() || name.chars().count() > 128 {
        return Err(ServiceError::invalid("name", "must be 1-128 characters"));
    }
    // A token never outlives the one that made it: a stolen short-lived token cannot mint a
    // lasting one.
    let asked = expires_in.map(expiry).transpose()?;
    let expires_at = match (asked, principal.token_expires_at) {
        (Some(asked), Some(own)) => Some(asked.min(own)),
        (asked, own) => asked.or(own),
    };
    let user_id = target_user(service, principal, user_id).await?;
    let secret = generate_token();
    let token = service
        .store
        .create_token(&NewToken {
            user_id,
            name,
            token_hash: hash_token(&secret),
            prefix: display_prefix(&secret),
            expires_at,
            // Revoking the caller's token revokes this one too.
            parent: Some(principal.token_id),
        })
        .await?;
    tracing::info!(token.id = %token.id, user.id = %user_id, "token created");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::TokenCreate,
        format!("token {} ({})", token.id, token.name),
        format!("for user {user_id}"),
    )
    .await;
    Ok((token, secret))
}

/// The tokens of `user_id` (the caller when `None`).
pub async fn list(
    service: &Service,
    principal: &Principal,
    user_id: Option<UserId>,
) -> ServiceResult<Vec<TokenInfo>> {
    let user_id = target_user(service, principal, user_id).await?;
    Ok(service.store.list_tokens(user_id).await?)
}

async fn visible_token(
    service: &Service,
    principal: &Principal,
    raw: &str,
) -> ServiceResult<TokenInfo> {
    let not_found = || ServiceError::not_found(format!("no token `{raw}`"));
    let id: TokenId = raw.parse().map_err(|_| not_found())?;
    let token = service
        .store
        .get_token(id)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no token `{raw}`")))?;
    if token.user_id == principal.user.id {
        return Ok(token);
    }
    let owner = service
        .store
        .get_user(Scope::Cluster, token.user_id)
        .await?;
    if !principal.can_manage_users_of(owner.tenant_id) {
        return Err(not_found());
    }
    if !principal.may_manage_tokens_of(&owner) {
        return Err(more_privileged(&owner));
    }
    Ok(token)
}

/// Revokes token `id` (as a path gives it); it stops working at once on this replica.
pub async fn revoke(
    service: &Service,
    principal: &Principal,
    id: &str,
) -> ServiceResult<TokenInfo> {
    let token = visible_token(service, principal, id).await?;
    let token = service.store.revoke_token(token.id).await?;
    service.tokens.forget_all();
    tracing::info!(token.id = %token.id, "token revoked");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::TokenRevoke,
        format!("token {} ({})", token.id, token.name),
        format!("of user {}", token.user_id),
    )
    .await;
    Ok(token)
}
