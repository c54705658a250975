//! `drover login --sso`: signing in through the server's identity provider with the OAuth 2.0
//! device authorization grant (RFC 8628), through the `openidconnect` crate. The CLI asks the server
//! which provider and public client to use (`GET /api/v1/auth/sso`), shows the person a URL and a
//! code to approve in any browser, polls the provider for tokens, and trades the ID token with the
//! server for a short-lived Drover token. The provider's refresh token is kept in the context
//! (the config file, mode 0600); when the Drover token is near its end the CLI refreshes at the
//! provider and trades again, silently ([`refresh_if_due`]) — so a group taken away at the provider
//! ends the CLI's access at its next refresh too.

use crate::http;
use anyhow::{Context as _, anyhow, bail};
use chrono::{DateTime, Utc};
use openidconnect::core::{
    CoreAuthDisplay, CoreClaimName, CoreClaimType, CoreClient, CoreClientAuthMethod,
    CoreDeviceAuthorizationResponse, CoreGrantType, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm, CoreResponseMode,
    CoreResponseType, CoreSubjectIdentifierType,
};
use openidconnect::{
    AdditionalProviderMetadata, AuthType, ClientId, DeviceAuthorizationUrl, IssuerUrl,
    OAuth2TokenResponse, ProviderMetadata, RefreshToken, Scope, TokenResponse,
};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The provider's discovery document with the device authorization endpoint, which the core
/// metadata does not carry.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct DeviceEndpoint {
    device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}
impl AdditionalProviderMetadata for DeviceEndpoint {}
type DeviceProviderMetadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// What the server says about its provider.
#[derive(Debug, Deserialize)]
struct Described {
    issuer: String,
    cli_client_id: String,
    scopes: Vec<String>,
}

/// What the server gave for an ID token.
#[derive(Debug, Deserialize)]
pub struct Exchanged {
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub tenant: String,
    pub user: String,
}

/// A signed-in CLI: the Drover token and what renews it.
#[derive(Debug)]
pub struct SignedIn {
    pub exchanged: Exchanged,
    pub credential: SsoCredential,
}

/// How long the person has to approve the sign-in, at most (the provider's own limit is usually
/// shorter).
const DEVICE_TIMEOUT: Duration = Duration::from_secs(900);
/// The Drover token is renewed when it has less than this left.
const RENEW_BEFORE: chrono::Duration = chrono::Duration::seconds(60);

/// What keeps a context signed in through the server's identity provider: the provider's refresh
/// token, and when the Drover token it last got runs out. Kept in the context (the config file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SsoCredential {
    pub issuer: String,
    pub client_id: String,
    pub refresh_token: String,
    pub expires_at: DateTime<Utc>,
}

fn http() -> anyhow::Result<reqwest::Client> {
    http::builder()?
        // Following redirects would let a provider's answer send the CLI elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")
}

async fn provider(issuer: &str, http: &reqwest::Client) -> anyhow::Result<DeviceProviderMetadata> {
    let issuer_url =
        IssuerUrl::new(issuer.to_owned()).with_context(|| format!("issuer `{issuer}`"))?;
    DeviceProviderMetadata::discover_async(issuer_url, http)
        .await
        .with_context(|| {
            format!("cannot read the identity provider's discovery document at {issuer}")
        })
}

/// Signs in through the server's provider with the device flow; prints the URL and code to
/// standard error.
pub async fn sign_in(server: &str) -> anyhow::Result<SignedIn> {
    let http = http()?;
    let response = http
        .get(format!("{server}/api/v1/auth/sso"))
        .send()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    let described: Described = serde_json::from_value(
        http::decode(response)
            .await
            .context("this server does not offer single sign-on")?,
    )
    .context("the server's single sign-on description")?;
    let metadata = provider(&described.issuer, &http).await?;
    let Some(device) = metadata
        .additional_metadata()
        .device_authorization_endpoint
        .clone()
    else {
        bail!(
            "the identity provider at {} offers no device authorization endpoint; `drover login --sso` needs the device flow (RFC 8628)",
            described.issuer
        );
    };
    let client = CoreClient::from_provider_metadata(
        metadata,
        ClientId::new(described.cli_client_id.clone()),
        None,
    )
    .set_device_authorization_url(device)
    .set_auth_type(AuthType::RequestBody);
    let mut request = client.exchange_device_code();
    for scope in &described.scopes {
        request = request.add_scope(Scope::new(scope.clone()));
    }
    let details: CoreDeviceAuthorizationResponse = request
        .request_async(&http)
        .await
        .context("the identity provider refused to start the sign-in")?;
    match details.verification_uri_complete() {
        Some(complete) => eprintln!(
            "To sign in, open {}\n(or {} and enter the code {})",
            complete.secret(),
            details.verification_uri().as_str(),
            details.user_code().secret()
        ),
        None => eprintln!(
            "To sign in, open {} and enter the code {}",
            details.verification_uri().as_str(),
            details.user_code().secret()
        ),
    }
    eprintln!("Waiting for the sign-in to be approved…");
    let tokens = client
        .exchange_device_access_token(&details)?
        .request_async(&http, tokio::time::sleep, Some(DEVICE_TIMEOUT))
        .await
        .context("the sign-in did not complete")?;
    let id_token = tokens
        .id_token()
        .ok_or_else(|| {
            anyhow!("the identity provider sent no ID token (is `openid` among the scopes?)")
        })?
        .to_string();
    let Some(refresh) = tokens.refresh_token() else {
        bail!(
            "the identity provider sent no refresh token: the server's scopes need `offline_access`, and the CLI's client the refresh_token grant"
        );
    };
    let exchanged = exchange(server, &id_token).await?;
    Ok(SignedIn {
        credential: SsoCredential {
            issuer: described.issuer,
            client_id: described.cli_client_id,
            refresh_token: refresh.secret().clone(),
            expires_at: exchanged.expires_at,
        },
        exchanged,
    })
}

async fn exchange(server: &str, id_token: &str) -> anyhow::Result<Exchanged> {
    let response = http()?
        .post(format!("{server}/api/v1/auth/sso/token"))
        .json(&serde_json::json!({ "id_token": id_token }))
        .send()
        .await
        .with_context(|| format!("cannot reach {server}"))?;
    let answer = http::decode(response).await?;
    serde_json::from_value(answer).context("the server's answer to the ID token")
}

/// A renewed Drover token for a context signed in through the provider, when the one it holds
/// has less than a minute left: `None` while it is still good. Refreshes at the provider (keeping
/// the rotated refresh token) and trades the new ID token with the server.
pub async fn refresh_if_due(
    server: &str,
    credential: &SsoCredential,
) -> anyhow::Result<Option<(String, SsoCredential)>> {
    if credential.expires_at - Utc::now() > RENEW_BEFORE {
        return Ok(None);
    }
    let http = http()?;
    let metadata = provider(&credential.issuer, &http).await?;
    let client = CoreClient::from_provider_metadata(
        metadata,
        ClientId::new(credential.client_id.clone()),
        None,
    )
    .set_auth_type(AuthType::RequestBody);
    let refresh = RefreshToken::new(credential.refresh_token.clone());
    let tokens = client
        .exchange_refresh_token(&refresh)?
        .request_async(&http)
        .await
        .with_context(|| {
            format!(
                "your single sign-on session at {} ended; run `drover login --sso --server {server}` again",
                credential.issuer
            )
        })?;
    let id_token = tokens
        .id_token()
        .ok_or_else(|| anyhow!("the identity provider's refresh sent no ID token"))?
        .to_string();
    let exchanged = exchange(server, &id_token)
        .await
        .map_err(|err| anyhow!("{err:#}; run `drover login --sso --server {server}` again"))?;
    let renewed = SsoCredential {
        issuer: credential.issuer.clone(),
        client_id: credential.client_id.clone(),
        refresh_token: tokens
            .refresh_token()
            .map_or_else(|| credential.refresh_token.clone(), |t| t.secret().clone()),
        expires_at: exchanged.expires_at,
    };
    Ok(Some((exchanged.token, renewed)))
}
