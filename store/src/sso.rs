//! What single sign-on keeps (issue #56): sign-ins in progress (the `state` a browser was sent to
//! the provider with, as its SHA-256, spent once), which Drover user a provider's subject is in each
//! tenant its groups map to, and the dashboard sessions opened through the provider with their
//! refresh tokens sealed by the server key.

use super::StoreResult;
use crate::model::{NewUser, User};
use crate::secrets::Sealed;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::{Role, TenantId, TokenId, UserId};

/// A sign-in the browser was sent to the provider for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSsoLogin {
    pub state_hash: [u8; 32],
    pub nonce: String,
    pub pkce_verifier: String,
    /// The dashboard path to land on afterwards.
    pub next: String,
    pub expires_at: DateTime<Utc>,
}

/// A sign-in in progress, as its callback finds it (once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoLogin {
    pub nonce: String,
    pub pkce_verifier: String,
    pub next: String,
    pub expires_at: DateTime<Utc>,
}

/// One tenant a provider's subject is a user in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsoLink {
    pub tenant_id: TenantId,
    pub user_id: UserId,
}

/// A dashboard session opened through the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoSession {
    /// The session's own Drover token.
    pub token_id: TokenId,
    pub user_id: UserId,
    pub issuer: String,
    pub subject: String,
    /// The provider's refresh token, sealed; `None` when the provider gave none.
    pub refresh: Option<Sealed>,
    /// When the session is next refreshed at the provider.
    pub refresh_due: DateTime<Utc>,
}

#[async_trait]
pub trait SsoStore: Send + Sync {
    /// Keeps a sign-in in progress, and forgets the ones that expired.
    async fn begin_sso_login(&self, login: &NewSsoLogin) -> StoreResult<()>;
    /// The sign-in with this state, deleted as it is read: a second callback with the same state
    /// finds nothing. Expired ones are returned too (the caller refuses them, saying so).
    async fn take_sso_login(&self, state_hash: &[u8; 32]) -> StoreResult<Option<SsoLogin>>;

    /// The tenants the subject is a user in.
    async fn sso_links(&self, issuer: &str, subject: &str) -> StoreResult<Vec<SsoLink>>;
    /// Creates `user` and makes it the subject's user in its tenant, in one transaction. A user of
    /// that name in the tenant is a `Conflict` on `name`; the subject already linked there, a
    /// `Conflict` on `subject`.
    async fn link_sso_user(&self, issuer: &str, subject: &str, user: &NewUser)
    -> StoreResult<User>;
    /// The subject is no longer a user in `tenant`: the link goes, and every token of that user is
    /// revoked (the user's row stays, for the jobs and audit records that name it). Returns the
    /// user that was linked, if one was.
    async fn unlink_sso_user(
        &self,
        issuer: &str,
        subject: &str,
        tenant: TenantId,
    ) -> StoreResult<Option<UserId>>;
    /// Changes a user's role (the provider's groups changed).
    async fn set_user_role(
        &self,
        user: UserId,
        role: Role,
        cluster_admin: bool,
    ) -> StoreResult<User>;

    /// Keeps a session opened through the provider.
    async fn keep_sso_session(&self, session: &SsoSession) -> StoreResult<()>;
    /// Up to `limit` sessions due for a refresh at `now` whose tokens are still live; sessions whose
    /// tokens were revoked or expired are forgotten on the way.
    async fn due_sso_sessions(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<SsoSession>>;
    /// Takes a due session for this replica to refresh: moves its due time from `due` to `next`,
    /// only if no other replica did first. `false` when one did.
    async fn claim_sso_session(
        &self,
        token: TokenId,
        due: DateTime<Utc>,
        next: DateTime<Utc>,
    ) -> StoreResult<bool>;
    /// Keeps the refresh token the provider rotated to.
    async fn set_sso_refresh(&self, token: TokenId, refresh: Option<&Sealed>) -> StoreResult<()>;
    /// Ends a session: forgets it and revokes its token (and the tokens minted from it).
    async fn end_sso_session(&self, token: TokenId) -> StoreResult<()>;
}
