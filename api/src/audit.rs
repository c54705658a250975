//! The audit log: every privileged action — tenants, quotas, users, tokens, secrets, nodes, enrolment,
//! and a cluster administrator's changes to another tenant's jobs — with who, what, on what and when,
//! readable by cluster administrators (`GET /api/v1/audit`, `drover audit`).
//!
//! Recorded after the action succeeded, in its own statement: a database failure between the two
//! loses the record (and is logged), never the action.

use crate::auth::Principal;
use crate::store::{NewAuditEvent, Store};

/// What was done; the values the log shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    TenantCreate,
    TenantQuota,
    UserCreate,
    TokenCreate,
    TokenRevoke,
    SecretSet,
    SecretDelete,
    NodeCordon,
    NodeUncordon,
    NodeDrain,
    NodeRevoke,
    NodeEnroll,
    EnrollmentTokenCreate,
    EnrollmentTokenRevoke,
    JobCancel,
    JobPause,
    JobResume,
    JobResize,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::TenantCreate => "tenant.create",
            Action::TenantQuota => "tenant.quota",
            Action::UserCreate => "user.create",
            Action::TokenCreate => "token.create",
            Action::TokenRevoke => "token.revoke",
            Action::SecretSet => "secret.set",
            Action::SecretDelete => "secret.delete",
            Action::NodeCordon => "node.cordon",
            Action::NodeUncordon => "node.uncordon",
            Action::NodeDrain => "node.drain",
            Action::NodeRevoke => "node.revoke",
            Action::NodeEnroll => "node.enroll",
            Action::EnrollmentTokenCreate => "enrollment_token.create",
            Action::EnrollmentTokenRevoke => "enrollment_token.revoke",
            Action::JobCancel => "job.cancel",
            Action::JobPause => "job.pause",
            Action::JobResume => "job.resume",
            Action::JobResize => "job.resize",
        }
    }
}

/// Records `principal`'s `action` on `target`.
pub async fn record(
    store: &dyn Store,
    principal: &Principal,
    action: Action,
    target: impl Into<String>,
    detail: impl Into<String>,
) {
    write(store, &event(principal, action, target, detail)).await;
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

/// Records an executor's enrolment.
pub async fn record_enrolment(store: &dyn Store, node: &str, enrolled_with: &str) {
    let event = NewAuditEvent {
        actor_id: None,
        actor: format!("node:{node}"),
        tenant_id: None,
        action: Action::NodeEnroll.as_str(),
        target: node.to_owned(),
        detail: format!("with enrolment token `{enrolled_with}`"),
    };
    write(store, &event).await;
}

async fn write(store: &dyn Store, event: &NewAuditEvent) {
    if let Err(err) = store.record_audit(event).await {
        tracing::error!(action = event.action, actor = event.actor, target = event.target, error = %err, "cannot record an audit event");
    }
}
