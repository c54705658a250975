//! Bearer tokens and who is calling.
//!
//! Tokens are `drv_` followed by 43 URL-safe base64 characters (32 random bytes). Only their SHA-256 is
//! stored: they are long random strings, not passwords, so a slow hash would buy nothing.

use crate::error::ApiError;
use crate::state::AppState;
use crate::store::{Quota, Scope, User};
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

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
            ApiError::unauthenticated("missing `Authorization: Bearer <token>` header")
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                ApiError::unauthenticated("the Authorization header must be `Bearer <token>`")
            })?;
        let record = state
            .store
            .find_token(&hash_token(token))
            .await?
            .ok_or_else(|| ApiError::unauthenticated("invalid token"))?;
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
        })
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
