//! Roles within a tenant. Cluster administration is a separate flag on the user, not a role.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a user may do inside their tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything a member can, plus managing the tenant's users and their tokens.
    Admin,
    /// Submits, pauses and cancels the tenant's jobs; reads everything in the tenant.
    Member,
    /// Reads the tenant's jobs, events and nodes; changes nothing.
    Viewer,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Admin, Role::Member, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// May create, pause, resume and cancel jobs.
    pub fn can_write_jobs(self) -> bool {
        matches!(self, Role::Admin | Role::Member)
    }

    /// May create users in the tenant and manage their tokens.
    pub fn can_manage_users(self) -> bool {
        matches!(self, Role::Admin)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}` (expected admin, member or viewer)"))
    }
}
