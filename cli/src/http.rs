//! HTTP plumbing every call to a Drover server (or an identity provider) shares: a client builder
//! that trusts the authorities of `DROVER_CA_CERT` beside the system's, and the API's error format
//! turned into one-line messages. The API client (`client.rs`) and single sign-on (`sso.rs`) both
//! build on it.

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

/// The environment variable naming a PEM file of certificate authorities trusted beside the
/// system's, for a server whose certificate a private authority issued.
pub const CA_CERT_ENV: &str = "DROVER_CA_CERT";

/// An HTTP client builder trusting the system's authorities and those of `DROVER_CA_CERT`.
pub fn builder() -> anyhow::Result<reqwest::ClientBuilder> {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = std::env::var_os(CA_CERT_ENV).filter(|p| !p.is_empty()) {
        let pem = std::fs::read(&path)
            .with_context(|| format!("{CA_CERT_ENV}={}: cannot read it", path.to_string_lossy()))?;
        let authorities = reqwest::Certificate::from_pem_bundle(&pem).map_err(|err| {
            anyhow!(
                "{CA_CERT_ENV}={}: not PEM certificates: {err}",
                path.to_string_lossy()
            )
        })?;
        if authorities.is_empty() {
            bail!(
                "{CA_CERT_ENV}={}: holds no certificate",
                path.to_string_lossy()
            );
        }
        for authority in authorities {
            builder = builder.add_root_certificate(authority);
        }
    }
    Ok(builder)
}

/// The body of a response as JSON; an error status becomes its one-line message (and field).
pub async fn decode(response: reqwest::Response) -> anyhow::Result<Value> {
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .context("reading the server's response failed")?;
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    if status.is_success() {
        return Ok(body);
    }
    let error = &body["error"];
    let message = error["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_owned);
    match error["field"].as_str() {
        Some(field) => bail!("{message} (field `{field}`, HTTP {})", status.as_u16()),
        None => bail!("{message} (HTTP {})", status.as_u16()),
    }
}
