//! A small HTTP client for the REST API: bearer auth, the API's error format turned into one-line
//! messages, a retry of submissions that is safe because it reuses the Idempotency-Key, and the
//! encoding of names and ids into the paths it requests ([`segment`]).

use crate::global::GlobalArgs;
use crate::http::{builder, decode};
use anyhow::{Context, anyhow, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    /// A client for the server and token the flags, the environment or the current context name.
    pub async fn new(global: &GlobalArgs) -> anyhow::Result<Self> {
        let (server, token) = crate::config::resolve(global).await?;
        Self::with(&server, &token)
    }

    /// A client for this server with this token.
    pub fn with(server: &str, token: &str) -> anyhow::Result<Self> {
        let base = server.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--server must be an http:// or https:// URL, got `{base}`");
        }
        let http = builder()?
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(10))
            // The server closes a connection that sends no request for 10 s (its header-read
            // timeout): one idle half as long is not reused, so a request never races that close.
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            http,
            base,
            token: token.to_owned(),
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(Method::GET, path, None, &[]).await
    }

    /// Every item under `key` of a paged list (`path` with its query), following
    /// `meta.next_cursor` until there is none.
    pub async fn all_pages(&self, path: &str, key: &str) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page_path = match &cursor {
                Some(cursor) => format!("{path}&cursor={}", segment(cursor)),
                None => path.to_owned(),
            };
            let mut page = self.get(&page_path).await?;
            if let Some(Value::Array(more)) = page.get_mut(key).map(Value::take) {
                items.extend(more);
            }
            let next = page["meta"]["next_cursor"].as_str().map(str::to_owned);
            if next.is_none() || next == cursor {
                return Ok(items);
            }
            cursor = next;
        }
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(body)?;
        self.send(Method::POST, path, Some(("application/json", bytes)), &[])
            .await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(body)?;
        self.send(Method::PUT, path, Some(("application/json", bytes)), &[])
            .await
    }

    /// A GET whose body the caller streams (logs, downloads); errors are decoded as usual. No overall
    /// timeout: a followed log stays open as long as the job runs.
    pub async fn get_streaming(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        let response = builder()?
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|err| {
                if err.is_connect() {
                    anyhow!(
                        "cannot reach the Drover server at {} (is it running? set --server or DROVER_SERVER)",
                        self.base
                    )
                } else {
                    anyhow!(err).context(format!("request to {url} failed"))
                }
            })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        Err(decode(response)
            .await
            .err()
            .unwrap_or_else(|| anyhow!("unexpected HTTP {status}")))
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(Method::DELETE, path, None, &[]).await
    }

    /// Sends a request; on a connection failure or a 502/503/504 it retries (three tries in all) when
    /// `idempotent`, which every verb but a keyless POST is.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let idempotent = method != Method::POST
            || headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("idempotency-key"));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.token);
            for (key, value) in headers {
                request = request.header(*key, *value);
            }
            if let Some((content_type, bytes)) = &body {
                request = request
                    .header("content-type", *content_type)
                    .body(bytes.clone());
            }
            let retriable = |status: StatusCode| {
                matches!(
                    status,
                    StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                )
            };
            match request.send().await {
                Ok(response) if idempotent && attempt < 3 && retriable(response.status()) => {}
                Ok(response) => return decode(response).await,
                Err(err) if idempotent && attempt < 3 && (err.is_connect() || err.is_timeout()) => {
                    tracing::debug!(error = %err, attempt, "retrying");
                }
                Err(err) if err.is_connect() => {
                    bail!(
                        "cannot reach the Drover server at {} (is it running? set --server or DROVER_SERVER)",
                        self.base
                    )
                }
                Err(err) => return Err(anyhow!(err).context(format!("request to {url} failed"))),
            }
            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
        }
    }
}

/// A name or id as one URL path segment: percent-encoded as it is (the server then judges it, so
/// `hf token` is refused by name rather than quietly becoming `hftoken`). A segment of dots alone
/// would move up the path, so it becomes one that names nothing.
pub(crate) fn segment(id: &str) -> String {
    use std::fmt::Write;
    if !id.is_empty() && id.chars().all(|c| c == '.') {
        return "_".to_owned();
    }
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
#[test]
fn a_segment_is_encoded_not_rewritten() {
    assert_eq!(segment("digits-mlp_2.v1"), "digits-mlp_2.v1");
    assert_eq!(segment("hf token"), "hf%20token");
    assert_eq!(segment("a/b?c#d"), "a%2Fb%3Fc%23d");
    assert_eq!(segment("ünï"), "%C3%BCn%C3%AF");
    assert_eq!(segment(".."), "_");
}
