//! Users: each belongs to one tenant with one role there. Tenant admins create users in their tenant;
//! cluster administrators anywhere, and only they make cluster administrators.

use crate::Service;
use crate::audit::{self, Action};
use crate::auth::Principal;
use crate::error::{ServiceError, ServiceResult};
use drover_core::{Role, UserId};
use drover_store::{NewUser, User};

fn validate_user_name(name: &str) -> ServiceResult<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@');
    if name.is_empty() || name.len() > 64 || !name.chars().all(ok_char) {
        return Err(ServiceError::invalid(
            "name",
            "must be 1-64 characters of letters, digits, '.', '_', '-' and '@'",
        ));
    }
    Ok(())
}

/// What a new user is.
#[derive(Debug, Clone)]
pub struct NewUserRequest {
    pub name: String,
    /// The tenant by name; the caller's own when `None`.
    pub tenant: Option<String>,
    pub role: Role,
    pub cluster_admin: bool,
}

pub async fn create(
    service: &Service,
    principal: &Principal,
    request: NewUserRequest,
) -> ServiceResult<User> {
    validate_user_name(&request.name)?;
    let tenant = match &request.tenant {
        None => service.store.get_tenant(principal.user.tenant_id).await?,
        // Anyone else's tenant gets the same answer whether it exists or not.
        Some(name) if !principal.user.cluster_admin && *name != principal.user.tenant_name => {
            return Err(ServiceError::forbidden(format!(
                "you may not create users in tenant `{name}`"
            ))
            .with_field("tenant"));
        }
        Some(name) => service
            .store
            .get_tenant_by_name(name)
            .await
            .map_err(|err| {
                ServiceError::from_store(err, || format!("no tenant `{name}`")).with_field("tenant")
            })?,
    };
    if !principal.can_manage_users_of(tenant.id) {
        return Err(ServiceError::forbidden(format!(
            "you may not create users in tenant `{}`",
            tenant.name
        )));
    }
    if request.cluster_admin {
        principal.require_cluster_admin()?;
    }
    let user = service
        .store
        .create_user(&NewUser {
            tenant_id: tenant.id,
            name: request.name,
            role: request.role,
            cluster_admin: request.cluster_admin,
        })
        .await?;
    tracing::info!(user.id = %user.id, tenant.id = %user.tenant_id, "user created");
    audit::record(
        service.store.as_ref(),
        principal,
        Action::UserCreate,
        format!("{}/{}", user.tenant_name, user.name),
        format!(
            "role {}{}",
            user.role,
            if user.cluster_admin {
                ", cluster administrator"
            } else {
                ""
            }
        ),
    )
    .await;
    Ok(user)
}

/// The users the caller may see: their tenant's, or everyone for cluster administrators.
pub async fn list(service: &Service, principal: &Principal) -> ServiceResult<Vec<User>> {
    Ok(service.store.list_users(principal.scope()).await?)
}

/// User `id` (as a path gives it), if the caller may see them.
pub async fn get(service: &Service, principal: &Principal, id: &str) -> ServiceResult<User> {
    let user_id: UserId = id
        .parse()
        .map_err(|_| ServiceError::not_found(format!("no user `{id}`")))?;
    service
        .store
        .get_user(principal.scope(), user_id)
        .await
        .map_err(|err| ServiceError::from_store(err, || format!("no user `{id}`")))
}
