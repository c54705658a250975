//! Request middleware: the per-token rate limit ([`limit_requests`]), whose buckets are
//! `drover_runtime::limits`'s.

use axum::extract::ConnectInfo;
use drover_runtime::limits::Rate;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// The bucket credentials not yet seen to work share, and sign-in attempts with them: made-up tokens
/// cannot each get a fresh burst (and a database lookup), nor a flood of them push real tokens'
/// buckets out. One per client address when the server knows it (`ConnectInfo`, which the server's
/// HTTP loop sets), so a flood from one address leaves other people's sign-ins and new tokens alone;
/// one for all otherwise.
fn unverified(peer: Option<IpAddr>) -> [u8; 32] {
    let mut key = [0u8; 32];
    if let Some(address) = peer {
        let octets = match address {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        key[..16].copy_from_slice(&octets);
        key[31] = 1;
    }
    key
}

/// Middleware: API requests beyond the caller's token's rate get `429 Too Many Requests` with
/// `Retry-After`. A token gets its own bucket once a request with it has been let in (one that was
/// not refused as unauthenticated); until then it draws on one bucket shared by every such token,
/// as do sign-ins (with a token, or through the identity provider). Requests without any credential are not counted (they are
/// refused), nor are health checks and metrics scrapes.
pub async fn limit_requests(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let rate = state.request_buckets.rate();
    let path = request.uri().path();
    let free = matches!(path, "/healthz" | "/readyz" | "/metrics") || path.starts_with("/static/");
    if rate.is_unlimited() || free {
        return next.run(request).await;
    }
    // A bearer token, or a dashboard session (whose pages and buttons count like API calls).
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or_else(|| crate::auth::session_cookie(request.headers()))
        .map(drover_store::tokens::hash_token);
    // Sign-ins: with a token, or through the identity provider (each of whose starts keeps a row
    // until its callback, and whose exchange verifies a signature).
    let sign_in = (request.method() == axum::http::Method::POST && path == "/login")
        || path.starts_with("/login/sso")
        || path.starts_with("/api/v1/auth/sso");
    let unverified = unverified(
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip()),
    );
    let now = Instant::now();
    let charged = match &token {
        Some(hash) if state.request_buckets.contains(hash) => Some(hash),
        Some(_) => Some(&unverified),
        None if sign_in => Some(&unverified),
        None => None,
    };
    if let Some(key) = charged
        && let Err(wait) = state.request_buckets.take_one(key, now)
    {
        let whose = if *key == unverified {
            "sign-ins and tokens not yet seen to work, from this address"
        } else {
            "this token"
        };
        return too_many(rate, wait, whose);
    }
    let response = next.run(request).await;
    if let Some(hash) = token
        && response.status() != axum::http::StatusCode::UNAUTHORIZED
        && !state.request_buckets.contains(&hash)
    {
        // The token worked: from now on it has its own bucket (this request already counted).
        let _ = state.request_buckets.take_one(&hash, now);
    }
    response
}

fn too_many(rate: Rate, wait: Duration, whose: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = crate::error::ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!(
            "too many requests from {whose}: at most {} a second (bursts of {}); retry in {seconds} s",
            rate.per_second, rate.burst
        ),
    )
    .into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(seconds),
    );
    response
}
