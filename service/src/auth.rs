//! Who is calling, and what they may do: a [`Principal`] found from a bearer token (API or dashboard
//! session; the tokens themselves are `drover_store::tokens`), the authorisation rules every entrance
//! applies (job writers, cluster administrators, who may manage whose users and tokens), and the
//! short-lived cache of tokens found valid.

use crate::Service;
use crate::error::ServiceError;
use chrono::Utc;
use drover_core::{Role, TokenId};
use drover_store::tokens::hash_token;
use drover_store::{Quota, Scope, User};

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

    pub fn require_job_writer(&self) -> Result<(), ServiceError> {
        if self.user.cluster_admin || self.user.role.can_write_jobs() {
            Ok(())
        } else {
            Err(ServiceError::forbidden(format!(
                "role `{}` may read jobs but not submit or change them",
                self.user.role
            )))
        }
    }

    pub fn require_cluster_admin(&self) -> Result<(), ServiceError> {
        if self.user.cluster_admin {
            Ok(())
        } else {
            Err(ServiceError::forbidden(
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

impl Principal {
    /// The user a token (API or session) belongs to, if it is known, unrevoked and unexpired.
    pub async fn from_token(service: &Service, token: &str) -> Result<Principal, ServiceError> {
        let hash = hash_token(token);
        let record = match service.tokens.get(&hash) {
            Some(record) => record,
            None => {
                let record = service
                    .store
                    .find_token(&hash)
                    .await?
                    .ok_or_else(|| ServiceError::unauthenticated("invalid token"))?;
                service.tokens.put(hash, record.clone());
                record
            }
        };
        if record.token.revoked_at.is_some() {
            return Err(ServiceError::unauthenticated("this token was revoked"));
        }
        if record
            .token
            .expires_at
            .is_some_and(|expiry| expiry <= Utc::now())
        {
            return Err(ServiceError::unauthenticated("this token has expired"));
        }
        Ok(Principal {
            user: record.user,
            token_id: record.token.id,
            tenant_quota: record.tenant_quota,
            token_expires_at: record.token.expires_at,
        })
    }
}

/// The scope a `?tenant=` query asks for: the caller's own by default; another tenant only for a
/// cluster administrator (anyone else gets the same 403 whether that tenant exists or not).
pub async fn tenant_scope(
    service: &Service,
    principal: &Principal,
    tenant: Option<&str>,
    what: &str,
) -> crate::error::ServiceResult<Scope> {
    match tenant {
        None => Ok(principal.scope()),
        Some(name) if !principal.user.cluster_admin && name != principal.user.tenant_name => Err(
            ServiceError::forbidden(format!("you may only list your own tenant's {what}"))
                .with_field("tenant"),
        ),
        Some(name) => {
            let tenant = service
                .store
                .get_tenant_by_name(name)
                .await
                .map_err(|err| {
                    ServiceError::from_store(err, || format!("no tenant `{name}`"))
                        .with_field("tenant")
                })?;
            Ok(Scope::Tenant(tenant.id))
        }
    }
}
