//! [`Scope`]: which tenant's rows a call may touch, so that forgetting to restrict a query to the
//! caller's tenant is a type error rather than a missing `WHERE`.

use drover_core::TenantId;

/// Which rows a tenant-scoped call may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only this tenant's.
    Tenant(TenantId),
    /// Every tenant's: cluster administrators and the control plane itself.
    Cluster,
}

impl Scope {
    pub(crate) fn tenant(self) -> Option<TenantId> {
        match self {
            Scope::Tenant(id) => Some(id),
            Scope::Cluster => None,
        }
    }
}
