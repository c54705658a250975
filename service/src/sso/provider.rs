//! The company's OpenID Connect provider, through the `openidconnect` crate: discovery (refetched
//! hourly, and at once — at most every [`REFETCH_GAP`] — when a token names a key the cached key set
//! lacks, so the provider can rotate its keys), the authorization-code flow with PKCE, refresh, and
//! the verification of ID tokens (signature, issuer, audience, expiry with a bounded clock skew,
//! nonce). No JWT is handled by hand.

use super::config::{MAX_CLOCK_SKEW, SsoConfig, SsoDescription};
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm, CoreProviderMetadata,
};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret,
    CsrfToken, IdToken, IdTokenVerifier, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RefreshToken, Scope, SignatureVerificationError, TokenResponse,
    reqwest,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long discovery's answer (endpoints and signing keys) is used before it is fetched again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// The least time between two fetches a token naming an unknown key may cause.
pub const REFETCH_GAP: Duration = Duration::from_secs(10);

/// Every claim of an ID token beyond the standard ones, by name, so the groups claim can be any.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OtherClaims {
    #[serde(flatten)]
    pub claims: BTreeMap<String, serde_json::Value>,
}
impl AdditionalClaims for OtherClaims {}

type Token = IdToken<
    OtherClaims,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;

/// Who an ID token says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
    /// `preferred_username`, else `email`, else the subject.
    pub name: String,
    pub groups: Vec<String>,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

/// What the provider answered a code exchange or a refresh with.
#[derive(Debug)]
pub struct Tokens {
    pub id_token: String,
    pub refresh_token: Option<String>,
}

/// Why the provider, or a token from it, was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider cannot be reached or answered nonsense: not the caller's fault.
    #[error("the identity provider is unavailable: {0}")]
    Unavailable(String),
    /// The provider refused (a spent code, a revoked refresh token).
    #[error("the identity provider refused: {0}")]
    Refused(String),
    /// The ID token is not acceptable (signature, audience, expiry, nonce…).
    #[error("the ID token was refused: {0}")]
    BadToken(String),
}

/// Which client an ID token must have been issued to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The dashboard's (confidential) client.
    Dashboard,
    /// The CLI's public client (the device flow).
    Cli,
}

struct Cached {
    metadata: CoreProviderMetadata,
    fetched: Instant,
}

/// The provider, as this server talks to it.
pub struct Provider {
    config: SsoConfig,
    http: reqwest::Client,
    cached: tokio::sync::RwLock<Option<Cached>>,
    last_forced: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("issuer", &self.config.issuer)
            .finish_non_exhaustive()
    }
}

fn unavailable(err: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable(err.to_string())
}

/// The chain of an error's causes, one line: the crate's outer errors alone say little.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Provider {
    /// A provider for `config`; nothing is fetched until first needed.
    pub fn new(config: SsoConfig) -> anyhow::Result<Self> {
        let mut http = reqwest::Client::builder()
            // Following redirects would let a provider's answer send this server elsewhere (SSRF).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5));
        if let Some(pem) = &config.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem.as_bytes())? {
                http = http.add_root_certificate(cert);
            }
        }
        IssuerUrl::new(config.issuer.clone())?;
        RedirectUrl::new(config.redirect_url())?;
        Ok(Self {
            config,
            http: http.build()?,
            cached: tokio::sync::RwLock::new(None),
            last_forced: Mutex::new(None),
        })
    }

    pub fn config(&self) -> &SsoConfig {
        &self.config
    }

    /// Discovery's answer: cached for [`METADATA_TTL`]; fetched again now when `force` (a token
    /// named a key the cached set lacks), unless that was done in the last [`REFETCH_GAP`].
    async fn metadata(&self, force: bool) -> Result<CoreProviderMetadata, ProviderError> {
        if let Some(cached) = self.cached.read().await.as_ref() {
            let forced_now = force && {
                let mut last = self.last_forced.lock().unwrap_or_else(|e| e.into_inner());
                let due = last.is_none_or(|at| at.elapsed() >= REFETCH_GAP);
                if due {
                    *last = Some(Instant::now());
                }
                due
            };
            if !forced_now && cached.fetched.elapsed() < METADATA_TTL {
                return Ok(cached.metadata.clone());
            }
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(unavailable)?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|err| unavailable(chain(&err)))?;
        tracing::debug!(issuer = %self.config.issuer, keys = metadata.jwks().keys().len(), "identity provider discovered");
        *self.cached.write().await = Some(Cached {
            metadata: metadata.clone(),
            fetched: Instant::now(),
        });
        Ok(metadata)
    }

    fn client(
        &self,
        metadata: CoreProviderMetadata,
        audience: Audience,
    ) -> Result<
        CoreClient<
            openidconnect::EndpointSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointMaybeSet,
            openidconnect::EndpointMaybeSet,
        >,
        ProviderError,
    > {
        let (id, secret) = match audience {
            Audience::Dashboard => (
                self.config.client_id.clone(),
                self.config.client_secret.clone().map(ClientSecret::new),
            ),
            Audience::Cli => (self.config.cli_client_id().to_owned(), None),
        };
        let redirect = RedirectUrl::new(self.config.redirect_url()).map_err(unavailable)?;
        Ok(
            CoreClient::from_provider_metadata(metadata, ClientId::new(id), secret)
                .set_redirect_uri(redirect),
        )
    }

    /// Where to send a browser to sign in: the provider's authorization URL with a fresh `state`,
    /// `nonce` and PKCE challenge. Returns the URL, the state, the nonce and the PKCE verifier.
    pub async fn authorization(&self) -> Result<(String, String, String, String), ProviderError> {
        let client = self.client(self.metadata(false).await?, Audience::Dashboard)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        Ok((
            url.to_string(),
            state.secret().clone(),
            nonce.secret().clone(),
            verifier.secret().clone(),
        ))
    }

    /// Trades the code the provider sent the browser back with for tokens.
    pub async fn exchange_code(
        &self,
        code: &str,
        pkce_verifier: &str,
    ) -> Result<Tokens, ProviderError> {
        let client = self.client(self.metadata(false).await?, Audience::Dashboard)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(unavailable)?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|err| ProviderError::Refused(chain(&err)))?;
        let id_token = response
            .id_token()
            .ok_or_else(|| ProviderError::BadToken("the provider sent no ID token".into()))?;
        Ok(Tokens {
            id_token: id_token.to_string(),
            refresh_token: response.refresh_token().map(|t| t.secret().clone()),
        })
    }

    /// Refreshes a session at the provider: new tokens, or the provider's refusal.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, ProviderError> {
        let client = self.client(self.metadata(false).await?, Audience::Dashboard)?;
        let refresh = RefreshToken::new(refresh_token.to_owned());
        let response = client
            .exchange_refresh_token(&refresh)
            .map_err(unavailable)?
            .request_async(&self.http)
            .await
            .map_err(|err| match &err {
                openidconnect::RequestTokenError::ServerResponse(_) => {
                    ProviderError::Refused(chain(&err))
                }
                _ => unavailable(chain(&err)),
            })?;
        let id_token = response.id_token().ok_or_else(|| {
            ProviderError::BadToken("the provider's refresh sent no ID token".into())
        })?;
        Ok(Tokens {
            id_token: id_token.to_string(),
            refresh_token: response.refresh_token().map(|t| t.secret().clone()),
        })
    }

    /// Verifies an ID token issued to `audience`'s client: signature by one of the provider's
    /// keys, issuer, audience, expiry (allowing the configured clock skew), issue time not in the
    /// future, and the nonce when one was sent.
    pub async fn verify(
        &self,
        id_token: &str,
        audience: Audience,
        nonce: Option<&str>,
    ) -> Result<Identity, ProviderError> {
        let token: Token = id_token.parse().map_err(|err: serde_json::Error| {
            ProviderError::BadToken(format!("not a JWT: {err}"))
        })?;
        match self.verify_with(&token, audience, nonce, false).await {
            // A key the cached set lacks: the provider may have rotated; look again, once.
            Err(ProviderError::BadToken(reason)) if reason.starts_with(NO_KEY) => {
                self.verify_with(&token, audience, nonce, true).await
            }
            other => other,
        }
    }

    async fn verify_with(
        &self,
        token: &Token,
        audience: Audience,
        nonce: Option<&str>,
        refetch: bool,
    ) -> Result<Identity, ProviderError> {
        let metadata = self.metadata(refetch).await?;
        let issuer = metadata.issuer().clone();
        let client_id = match audience {
            Audience::Dashboard => self.config.client_id.clone(),
            Audience::Cli => self.config.cli_client_id().to_owned(),
        };
        let skew = chrono::Duration::from_std(self.config.clock_skew).unwrap_or_default();
        let keys = metadata.jwks().clone();
        let verifier: IdTokenVerifier<'_, _> = match (audience, &self.config.client_secret) {
            (Audience::Dashboard, Some(secret)) => IdTokenVerifier::new_confidential_client(
                ClientId::new(client_id),
                ClientSecret::new(secret.clone()),
                issuer.clone(),
                keys,
            ),
            _ => IdTokenVerifier::new_public_client(ClientId::new(client_id), issuer.clone(), keys),
        }
        // Expired up to `skew` ago still counts as valid: the provider's clock may be ahead.
        .set_time_fn(move || chrono::Utc::now() - skew)
        .set_issue_time_verifier_fn(move |issued| {
            if issued > chrono::Utc::now() + skew {
                Err(format!("issued in the future ({issued})"))
            } else {
                Ok(())
            }
        });
        let nonce = nonce.map(|n| Nonce::new(n.to_owned()));
        let claims = match &nonce {
            Some(nonce) => token.claims(&verifier, nonce),
            // The device flow sends no nonce.
            None => token.claims(&verifier, |_: Option<&Nonce>| Ok(())),
        }
        .map_err(|err| match &err {
            ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            ) => ProviderError::BadToken(format!("{NO_KEY}: {}", chain(&err))),
            _ => ProviderError::BadToken(chain(&err)),
        })?;
        let other = &claims.additional_claims().claims;
        let name = claims
            .preferred_username()
            .map(|n| n.as_str().to_owned())
            .or_else(|| claims.email().map(|e| e.as_str().to_owned()))
            .unwrap_or_else(|| claims.subject().as_str().to_owned());
        Ok(Identity {
            issuer: issuer.as_str().to_owned(),
            subject: claims.subject().as_str().to_owned(),
            name,
            groups: super::grants::groups_of(other.get(&self.config.groups_claim)),
            expires_at: claims.expiration(),
        })
    }
}

const NO_KEY: &str = "no key of the provider's signed it";

/// Single sign-on, as a server holds it.
#[derive(Debug)]
pub struct Sso {
    pub(super) provider: Provider,
}

impl Sso {
    pub fn new(config: SsoConfig) -> anyhow::Result<Self> {
        if config.clock_skew > MAX_CLOCK_SKEW {
            anyhow::bail!(
                "--oidc-clock-skew must be at most {}",
                humantime::format_duration(MAX_CLOCK_SKEW)
            );
        }
        if config.group_map.is_empty() && config.admin_group.is_none() {
            anyhow::bail!(
                "--oidc-issuer needs at least one --oidc-group-map GROUP=TENANT:ROLE: without one no sign-in would give access to anything"
            );
        }
        Ok(Self {
            provider: Provider::new(config)?,
        })
    }

    pub fn config(&self) -> &SsoConfig {
        self.provider.config()
    }

    pub fn describe(&self) -> SsoDescription {
        let config = self.config();
        SsoDescription {
            issuer: config.issuer.clone(),
            cli_client_id: config.cli_client_id().to_owned(),
            scopes: config.scopes.clone(),
            display_name: config.display_name.clone(),
        }
    }
}
