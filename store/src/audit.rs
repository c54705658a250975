//! Audit rows: what a privileged action is called in the log ([`Action`]), and writing a row so that
//! a database failure loses the record (logged), never the action it records. Who did it comes from
//! the caller: the service layer's audit module fills in a user; an executor's enrolment names its node.

use crate::{NewAuditEvent, Store};

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
    /// The provider's groups made an identity a user of a tenant (single sign-on).
    SsoLink,
    /// The groups no longer give the tenant: the user's tokens were revoked.
    SsoUnlink,
    /// The groups now give another role.
    SsoRole,
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
            Action::SsoLink => "sso.link",
            Action::SsoUnlink => "sso.unlink",
            Action::SsoRole => "sso.role",
        }
    }
}

/// The row an executor's enrolment writes.
pub fn enrolment_event(node: &str, enrolled_with: &str) -> NewAuditEvent {
    NewAuditEvent {
        actor_id: None,
        actor: format!("node:{node}"),
        tenant_id: None,
        action: Action::NodeEnroll.as_str(),
        target: node.to_owned(),
        detail: format!("with enrolment token `{enrolled_with}`"),
    }
}

/// Writes `event`, logging (not returning) a failure: the action it records has happened already.
pub async fn write(store: &dyn Store, event: &NewAuditEvent) {
    if let Err(err) = store.record_audit(event).await {
        tracing::error!(action = event.action, actor = event.actor, target = event.target, error = %err, "cannot record an audit event");
    }
}
