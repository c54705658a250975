//! The audit log: every privileged action — tenants, quotas, users, tokens, secrets, nodes, enrolment,
//! and a cluster administrator's changes to another tenant's jobs — with who, what, on what and when,
//! readable by cluster administrators (`GET /api/v1/audit`, `drover audit`).
//!
//! Recorded after the action succeeded, in its own statement: a database failure between the two
//! loses the record (and is logged), never the action.

use crate::auth::Principal;
pub use drover_store::audit::Action;
use drover_store::{NewAuditEvent, Store};

/// Records `principal`'s `action` on `target`.
pub async fn record(
    store: &dyn Store,
    principal: &Principal,
    action: Action,
    target: impl Into<String>,
    detail: impl Into<String>,
) {
    drover_store::audit::write(store, &event(principal, action, target, detail)).await;
}

/// The event [`record`] writes, for a store call that records it with its change.
pub fn event(
    principal: &Principal,
    action: Action,
    target: impl Into<String>,
    detail: impl Into<String>,
) -> NewAuditEvent {
    NewAuditEvent {
        actor_id: Some(principal.user.id),
        actor: principal.user.name.clone(),
        tenant_id: Some(principal.user.tenant_id),
        action: action.as_str(),
        target: target.into(),
        detail: detail.into(),
    }
}
