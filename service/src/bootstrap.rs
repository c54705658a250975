//! The first start of a server: a cluster administrator must exist (in a `default` tenant), and a
//! token the configuration names must log in as one. Safe on every start and on every replica.

use drover_core::Role;
use drover_store::tokens::{display_prefix, generate_token, hash_token};
use drover_store::{NewTenant, NewToken, NewUser, Quota, Store, StoreError};

/// The tenant and user the first start creates.
pub const BOOTSTRAP_TENANT: &str = "default";
pub const BOOTSTRAP_ADMIN: &str = "admin";

/// What start-up did about the cluster administrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminBootstrap {
    /// Created now, with a generated token to show once.
    CreatedWithToken(String),
    /// Created now, with the token the configuration gave.
    CreatedWithGivenToken,
    /// One existed already.
    Existing,
}

/// Makes sure a cluster administrator exists and that `given_token` (if any) logs in as one.
pub async fn ensure_cluster_admin(
    store: &dyn Store,
    given_token: Option<&str>,
) -> Result<AdminBootstrap, StoreError> {
    if let Some(admin) = store.first_cluster_admin().await? {
        if let Some(token) = given_token
            && store.find_token(&hash_token(token)).await?.is_none()
        {
            add_token(store, admin.id, token).await?;
        }
        return Ok(AdminBootstrap::Existing);
    }
    let tenant = match store
        .create_tenant(&NewTenant {
            name: BOOTSTRAP_TENANT.to_owned(),
            quota: Quota::default(),
        })
        .await
    {
        Ok(tenant) => tenant,
        Err(StoreError::Conflict { .. }) => store.get_tenant_by_name(BOOTSTRAP_TENANT).await?,
        Err(err) => return Err(err),
    };
    let admin = store
        .create_user(&NewUser {
            tenant_id: tenant.id,
            name: BOOTSTRAP_ADMIN.to_owned(),
            role: Role::Admin,
            cluster_admin: true,
        })
        .await?;
    match given_token {
        Some(token) => {
            add_token(store, admin.id, token).await?;
            Ok(AdminBootstrap::CreatedWithGivenToken)
        }
        None => {
            let token = generate_token();
            add_token(store, admin.id, &token).await?;
            Ok(AdminBootstrap::CreatedWithToken(token))
        }
    }
}

async fn add_token(
    store: &dyn Store,
    user_id: drover_core::UserId,
    token: &str,
) -> Result<(), StoreError> {
    store
        .create_token(&NewToken {
            user_id,
            name: "bootstrap".to_owned(),
            token_hash: hash_token(token),
            prefix: display_prefix(token),
            expires_at: None,
            parent: None,
        })
        .await
        .map(|_| ())
}
