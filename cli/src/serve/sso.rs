//! `drover server`'s single sign-on options (`--oidc-*`): the company's OpenID Connect provider,
//! the clients Drover is registered as there, and how groups map to tenants and roles. Turned into
//! the service's [`SsoConfig`]; the flow itself is `drover_service::sso`.

use anyhow::{Context, bail};
use drover_service::sso::SsoConfig;
use drover_service::sso::grants::GroupRule;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, clap::Args)]
pub struct SsoArgs {
    /// Sign users in through this OpenID Connect provider (its issuer URL; discovery is read from
    /// `<issuer>/.well-known/openid-configuration`). API tokens keep working beside it.
    #[arg(long, env = "DROVER_OIDC_ISSUER", requires_all = ["oidc_client_id", "public_url"])]
    oidc_issuer: Option<String>,
    /// The dashboard's client id at the provider (authorization code flow; redirect URI
    /// `<--public-url>/login/sso/callback`).
    #[arg(long, env = "DROVER_OIDC_CLIENT_ID", requires = "oidc_issuer")]
    oidc_client_id: Option<String>,
    /// The dashboard client's secret.
    #[arg(
        long,
        env = "DROVER_OIDC_CLIENT_SECRET",
        hide_env_values = true,
        conflicts_with = "oidc_client_secret_file",
        requires = "oidc_issuer"
    )]
    oidc_client_secret: Option<String>,
    /// A file holding the dashboard client's secret (a mounted Kubernetes Secret).
    #[arg(long, env = "DROVER_OIDC_CLIENT_SECRET_FILE", requires = "oidc_issuer")]
    oidc_client_secret_file: Option<PathBuf>,
    /// The public client `drover login --sso` uses (device authorization grant); the dashboard's
    /// client when not given (it must then allow the device flow without a secret).
    #[arg(long, env = "DROVER_OIDC_CLI_CLIENT_ID", requires = "oidc_issuer")]
    oidc_cli_client_id: Option<String>,
    /// Where browsers reach this server (`https://drover.example.com`): the provider sends them
    /// back to `<URL>/login/sso/callback`.
    #[arg(long, env = "DROVER_PUBLIC_URL")]
    public_url: Option<String>,
    /// Scopes asked for; `offline_access` is what gets a refresh token from most providers.
    #[arg(
        long,
        env = "DROVER_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "openid,profile,email,offline_access"
    )]
    oidc_scopes: Vec<String>,
    /// The ID token claim that lists the caller's groups.
    #[arg(long, env = "DROVER_OIDC_GROUPS_CLAIM", default_value = "groups")]
    oidc_groups_claim: String,
    /// GROUP=TENANT:ROLE (role admin, member or viewer): members of the provider's GROUP are users
    /// of TENANT with ROLE. Repeat it, or separate with commas; a dashboard sign-in lands in the
    /// first tenant the caller's groups give, in this order.
    #[arg(long, env = "DROVER_OIDC_GROUP_MAP", value_delimiter = ',')]
    oidc_group_map: Vec<String>,
    /// Members of this provider group are cluster administrators.
    #[arg(long, env = "DROVER_OIDC_CLUSTER_ADMIN_GROUP")]
    oidc_cluster_admin_group: Option<String>,
    /// How often a signed-in session is refreshed at the provider, its groups read again (a group
    /// taken away ends the access it gave); also how long the CLI's exchanged token lives.
    #[arg(long, env = "DROVER_OIDC_REFRESH_INTERVAL", value_parser = humantime::parse_duration, default_value = "5m")]
    oidc_refresh_interval: Duration,
    /// How far the provider's clock may be from this server's when token expiry is checked (at
    /// most 5m).
    #[arg(long, env = "DROVER_OIDC_CLOCK_SKEW", value_parser = humantime::parse_duration, default_value = "60s")]
    oidc_clock_skew: Duration,
    /// What the login page's button calls the provider ("Sign in with …").
    #[arg(long, env = "DROVER_OIDC_NAME", default_value = "single sign-on")]
    oidc_name: String,
    /// Authorities (PEM) to trust for the provider's HTTPS, beside the public ones.
    #[arg(long, env = "DROVER_OIDC_CA_CERT")]
    oidc_ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for SsoArgs {
    /// Never the client secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoArgs")
            .field("oidc_issuer", &self.oidc_issuer)
            .field("oidc_client_id", &self.oidc_client_id)
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

impl SsoArgs {
    /// The service's configuration; `None` without `--oidc-issuer`.
    pub fn config(&self) -> anyhow::Result<Option<SsoConfig>> {
        let Some(issuer) = self.oidc_issuer.clone() else {
            return Ok(None);
        };
        let public_url = self.public_url.clone().unwrap_or_default();
        if !(public_url.starts_with("https://") || public_url.starts_with("http://")) {
            bail!("--public-url must be an http(s) URL, got `{public_url}`");
        }
        let client_secret = match (&self.oidc_client_secret, &self.oidc_client_secret_file) {
            (Some(secret), _) => Some(secret.clone()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| {
                        format!("cannot read --oidc-client-secret-file {}", path.display())
                    })?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        let group_map = self
            .oidc_group_map
            .iter()
            .filter(|rule| !rule.trim().is_empty())
            .map(|rule| {
                rule.parse::<GroupRule>()
                    .map_err(|err| anyhow::anyhow!("--oidc-group-map: {err}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if !self.oidc_scopes.iter().any(|scope| scope == "openid") {
            bail!("--oidc-scopes must include `openid`");
        }
        if self.oidc_refresh_interval < Duration::from_secs(1) {
            bail!("--oidc-refresh-interval must be at least 1s");
        }
        let ca_pem = self
            .oidc_ca_cert
            .as_ref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --oidc-ca-cert {}", path.display()))
            })
            .transpose()?;
        Ok(Some(SsoConfig {
            issuer,
            client_id: self.oidc_client_id.clone().unwrap_or_default(),
            client_secret,
            cli_client_id: self.oidc_cli_client_id.clone(),
            public_url,
            scopes: self.oidc_scopes.clone(),
            groups_claim: self.oidc_groups_claim.clone(),
            group_map,
            admin_group: self.oidc_cluster_admin_group.clone(),
            refresh_every: self.oidc_refresh_interval,
            clock_skew: self.oidc_clock_skew,
            display_name: self.oidc_name.clone(),
            ca_pem,
        }))
    }
}
