//! Bearer tokens and who is calling.
//!
//! Tokens are `drv_` followed by 43 URL-safe base64 characters (32 random bytes). Only their SHA-256 is
//! stored: they are long random strings, not passwords, so a slow hash would buy nothing.

use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{AuthRecord, Quota, Scope, User};
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use drover_core::{Role, TokenId};
use rand::RngCore;
use sha2::{Digest, Sha256};

pub const TOKEN_PREFIX: &str = "drv_";
/// Enrolment tokens, which executors exchange for a node credential.
pub const ENROLLMENT_PREFIX: &str = "dre_";
/// Node credentials, which executors authenticate their sessions with.
pub const NODE_CREDENTIAL_PREFIX: &str = "drn_";

/// A new random API token.
pub fn generate_token() -> String {
    generate_secret(TOKEN_PREFIX)
}

/// A new random secret: `prefix` and 32 random bytes in URL-safe base64.
pub fn generate_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// What listings show of a token: enough to tell tokens apart, never enough to use one.
pub fn display_prefix(token: &str) -> String {
    token.chars().take(TOKEN_PREFIX.len() + 6).collect()
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: User,
    pub token_id: TokenId,
    pub tenant_quota: Quota,
    /// When the token the caller holds expires (`None`: never, or no token). Nothing it makes
    /// (another token, a dashboard session) outlives it.
    pub token_expires_at: Option<chrono::DateTime<Utc>>,
}

impl Principal {
    /// Cluster administrators see every tenant; everyone else only their own.
    pub fn scope(&self) -> Scope {
        if self.user.cluster_admin {
            Scope::Cluster
        } else {
            Scope::Tenant(self.user.tenant_id)
        }
    }

    pub fn require_job_writer(&self) -> Result<(), ApiError> {
        if self.user.cluster_admin || self.user.role.can_write_jobs() {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "role `{}` may read jobs but not submit or change them",
                self.user.role
            )))
        }
    }

    pub fn require_cluster_admin(&self) -> Result<(), ApiError> {
        if self.user.cluster_admin {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "only cluster administrators may do this",
            ))
        }
    }

    /// Cluster administrators, and tenant admins within their tenant.
    pub fn can_manage_users_of(&self, tenant: drover_core::TenantId) -> bool {
        self.user.cluster_admin || (self.user.role == Role::Admin && self.user.tenant_id == tenant)
    }

    /// May mint, list and revoke `target`'s tokens: the caller's own, or those of a user the caller
    /// manages who holds less privilege than the caller (a tenant admin never acts for another tenant
    /// admin nor for a cluster administrator, whose token would reach every tenant). Cluster
    /// administrators act for anyone.
    pub fn may_manage_tokens_of(&self, target: &User) -> bool {
        target.id == self.user.id
            || self.user.cluster_admin
            || (self.can_manage_users_of(target.tenant_id)
                && Privilege::of(target) < Privilege::of(&self.user))
    }
}

/// How much a user may do, ordered: a caller acts for another user only when it holds at least as much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Privilege {
    Viewer,
    Member,
    TenantAdmin,
    ClusterAdmin,
}

impl Privilege {
    pub fn of(user: &User) -> Self {
        if user.cluster_admin {
            return Privilege::ClusterAdmin;
        }
        match user.role {
            Role::Admin => Privilege::TenantAdmin,
            Role::Member => Privilege::Member,
            Role::Viewer => Privilege::Viewer,
        }
    }
}

/// The dashboard's session cookie: an API token of its own, minted at login and revoked at logout.
pub const SESSION_COOKIE: &str = "drover_session";
/// The header (or form field `_csrf`) a cookie-authenticated request that changes something must carry.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The CSRF token of a session: derived from its secret, so a page can carry it and another site,
/// which cannot read the cookie, cannot compute it.
pub fn csrf_token(session: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"drover csrf\0")
        .chain_update(session.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}

/// The session token a request's cookies carry, if any.
pub fn session_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE && !value.is_empty()).then_some(value)
        })
}

/// Whether `given` is the session's CSRF token (compared in constant time).
pub fn csrf_matches(session: &str, given: &str) -> bool {
    let expected = csrf_token(session);
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Tokens this server found valid in the last [`TokenCache::TTL`], so a busy client's requests do
/// not each look their token up in the database. A token revoked or a quota changed through this
/// server takes effect at once ([`TokenCache::forget_all`]); through another replica, within the TTL.
/// Unknown tokens are never cached, so a guesser always reaches the database (and the rate limit).
#[derive(Debug, Default)]
pub struct TokenCache {
    entries:
        std::sync::Mutex<std::collections::HashMap<[u8; 32], (std::time::Instant, AuthRecord)>>,
}

impl TokenCache {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(2);
    /// Tokens remembered at most; past that, the expired ones are dropped, then all.
    const CAPACITY: usize = 4096;

    fn get(&self, hash: &[u8; 32]) -> Option<AuthRecord> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(hash)
            .filter(|(at, _)| at.elapsed() < Self::TTL)
            .map(|(_, record)| record.clone())
    }

    fn put(&self, hash: [u8; 32], record: AuthRecord) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= Self::CAPACITY {
            entries.retain(|_, (at, _)| at.elapsed() < Self::TTL);
            if entries.len() >= Self::CAPACITY {
                entries.clear();
            }
        }
        entries.insert(hash, (std::time::Instant::now(), record));
    }

    /// Forgets every token: after a revocation or a change to what a token's record holds.
    pub fn forget_all(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Principal {
    /// The user a token (API or session) belongs to, if it is known, unrevoked and unexpired.
    pub async fn from_token(state: &AppState, token: &str) -> Result<Principal, ApiError> {
        let hash = hash_token(token);
        let record = match state.tokens.get(&hash) {
            Some(record) => record,
            None => {
                let record = state
                    .store
                    .find_token(&hash)
                    .await?
                    .ok_or_else(|| ApiError::unauthenticated("invalid token"))?;
                state.tokens.put(hash, record.clone());
                record
            }
        };
        if record.token.revoked_at.is_some() {
            return Err(ApiError::unauthenticated("this token was revoked"));
        }
        if record
            .token
            .expires_at
            .is_some_and(|expiry| expiry <= Utc::now())
        {
            return Err(ApiError::unauthenticated("this token has expired"));
        }
        Ok(Principal {
            user: record.user,
            token_id: record.token.id,
            tenant_quota: record.tenant_quota,
            token_expires_at: record.token.expires_at,
        })
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    /// A bearer token, or the dashboard's session cookie; a cookie-authenticated request that
    /// changes something must also carry the session's CSRF token in `X-CSRF-Token`.
    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(header) = parts.headers.get(header::AUTHORIZATION) else {
            let Some(session) = session_cookie(&parts.headers) else {
                return Err(ApiError::unauthenticated(
                    "missing `Authorization: Bearer <token>` header",
                ));
            };
            if !parts.method.is_safe() {
                let given = parts
                    .headers
                    .get(CSRF_HEADER)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                if !csrf_matches(session, given) {
                    return Err(ApiError::forbidden(
                        "a request with the session cookie must carry the session's `X-CSRF-Token`",
                    ));
                }
            }
            return Principal::from_token(state, session).await;
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                ApiError::unauthenticated("the Authorization header must be `Bearer <token>`")
            })?;
        Principal::from_token(state, token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_hashed_stably() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_ne!(hash_token(&a), hash_token(&b));
        assert_eq!(display_prefix(&a).len(), 10);
    }
}
