//! How a server signs people in through an OpenID Connect provider (`drover server --oidc-*`), and
//! what it tells the CLI about it.

use super::grants::GroupRule;
use std::time::Duration;

/// The longest clock skew allowed between this server and the provider.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// How the server signs users in through the provider (`drover server --oidc-*`).
#[derive(Clone)]
pub struct SsoConfig {
    /// The provider's issuer URL (discovery is `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    /// The dashboard's client at the provider (authorization code flow).
    pub client_id: String,
    pub client_secret: Option<String>,
    /// The CLI's public client (device flow); the dashboard's when `None`.
    pub cli_client_id: Option<String>,
    /// Where browsers reach this server; the provider sends them back to
    /// `<public_url>/login/sso/callback`.
    pub public_url: String,
    pub scopes: Vec<String>,
    /// The ID token claim that lists the caller's groups.
    pub groups_claim: String,
    pub group_map: Vec<GroupRule>,
    /// Members of this group are cluster administrators.
    pub admin_group: Option<String>,
    /// How often an open session is refreshed at the provider (and its groups read again); also
    /// how long a Drover token the CLI gets by exchange lives.
    pub refresh_every: Duration,
    pub clock_skew: Duration,
    /// What the sign-in button calls the provider.
    pub display_name: String,
    /// A PEM bundle of authorities to trust for the provider's HTTPS, besides the public ones.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for SsoConfig {
    /// Never the client secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("cli_client_id", &self.cli_client_id)
            .field("public_url", &self.public_url)
            .field("groups_claim", &self.groups_claim)
            .field("group_map", &self.group_map)
            .field("admin_group", &self.admin_group)
            .finish_non_exhaustive()
    }
}

impl SsoConfig {
    pub fn redirect_url(&self) -> String {
        format!(
            "{}/login/sso/callback",
            self.public_url.trim_end_matches('/')
        )
    }

    pub fn cli_client_id(&self) -> &str {
        self.cli_client_id.as_deref().unwrap_or(&self.client_id)
    }
}

/// What the server answers `GET /api/v1/auth/sso`: enough for the CLI's device flow.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SsoDescription {
    pub issuer: String,
    /// The public client the CLI signs in with.
    pub cli_client_id: String,
    pub scopes: Vec<String>,
    pub display_name: String,
}
