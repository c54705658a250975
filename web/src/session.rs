//! Signing in and out, and the signed-in browser every page is for ([`Session`]). The API token a
//! user signs in with is used once, to find the user; the browser gets a session token of its own (an
//! API token named `dashboard session` that expires in [`SESSION_HOURS`]), in an HttpOnly,
//! SameSite=Strict cookie. Signing out revokes it, so a copied cookie dies with the session; it also
//! shows in the user's token list, where it can be revoked. With an identity provider configured
//! the login page also offers single sign-on (`/login/sso`, back at `/login/sso/callback`; the
//! flow itself is `drover_service::sso`), whose sessions end when the provider's refresh fails.

use crate::page::{Layout, cross_site, error_page, render, see_other};
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use drover_api::auth;
use drover_api::state::AppState;
use drover_service::auth::Principal;
use drover_service::sso;
use drover_store::NewToken;
use drover_store::tokens;
use serde::Deserialize;

pub const SESSION_HOURS: i64 = 12;

/// A signed-in browser: the caller, and the CSRF token its forms carry. Without a valid session a
/// page answers with a redirect to the login page, which comes back here afterwards.
#[derive(Debug)]
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let back = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let Some(token) = auth::session_cookie(&parts.headers) else {
            return Err(to_login(&back, None));
        };
        match Principal::from_token(state, token).await {
            Ok(principal) => Ok(Session {
                principal,
                csrf: auth::csrf_token(token),
            }),
            Err(err) if err.kind == drover_service::ErrorKind::Unauthenticated => {
                Err(to_login(&back, Some("your session ended; sign in again")))
            }
            Err(err) => Err(error_page(err.into())),
        }
    }
}

impl Session {
    /// The frame every page shares.
    pub fn layout(&self, active: &'static str) -> Layout {
        let user = &self.principal.user;
        Layout {
            user: user.name.clone(),
            tenant: user.tenant_name.clone(),
            role: if user.cluster_admin {
                "cluster admin".to_owned()
            } else {
                user.role.to_string()
            },
            csrf: self.csrf.clone(),
            active,
            admin: user.cluster_admin,
        }
    }

    pub fn can_write_jobs(&self) -> bool {
        self.principal.require_job_writer().is_ok()
    }
}

#[derive(askama::Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: Option<String>,
    notice: Option<String>,
    /// What the single sign-on button calls the provider, when the server has one.
    sso: Option<String>,
}

fn sso_name(state: &AppState) -> Option<String> {
    state
        .sso
        .as_ref()
        .map(|sso| sso.config().display_name.clone())
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    notice: Option<String>,
}

/// Only a path on this site: never another host (`//evil.example`, `https://…`).
fn safe_next(next: Option<&str>) -> String {
    match next {
        // No whitespace or control characters either: browsers drop a tab or a newline from a
        // URL (`/\t/evil.example` becomes `//evil.example`), and a newline cannot be a header.
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && path.len() <= 2048
                && !path.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// The login page, to come back to `back` afterwards.
pub fn to_login(back: &str, notice: Option<&str>) -> Response {
    let mut query = vec![("next", back)];
    if let Some(notice) = notice {
        query.push(("notice", notice));
    }
    let query = serde_urlencoded::to_string(query).unwrap_or_default();
    see_other(&format!("/login?{query}"))
}

pub async fn login_page(
    State(state): State<AppState>,
    Query(query): Query<LoginQuery>,
) -> Response {
    render(&LoginPage {
        next: safe_next(query.next.as_deref()),
        error: None,
        notice: query.notice.filter(|n| n.len() < 200),
        sso: sso_name(&state),
    })
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

pub async fn login(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if cross_site(&headers) {
        return (StatusCode::FORBIDDEN, "cross-site sign-in refused").into_response();
    }
    let form: LoginForm = match serde_urlencoded::from_bytes(&body) {
        Ok(form) => form,
        Err(_) => return refused(&state, "/", "the form was malformed; paste your API token"),
    };
    let next = safe_next(form.next.as_deref());
    let token = form.token.trim();
    if token.is_empty() {
        return refused(&state, &next, "paste an API token (it starts with drv_)");
    }
    let principal = match Principal::from_token(&state, token).await {
        Ok(principal) => principal,
        Err(err) if err.kind == drover_service::ErrorKind::Unauthenticated => {
            return refused(&state, &next, &format!("sign-in refused: {}", err.message));
        }
        Err(err) => return error_page(err.into()),
    };
    let session = tokens::generate_token();
    // A session never outlives the token it was opened with.
    let now = Utc::now();
    let expires_at = (now + chrono::Duration::hours(SESSION_HOURS)).min(
        principal
            .token_expires_at
            .unwrap_or(chrono::DateTime::<Utc>::MAX_UTC),
    );
    let new = NewToken {
        user_id: principal.user.id,
        name: "dashboard session".to_owned(),
        token_hash: tokens::hash_token(&session),
        prefix: tokens::display_prefix(&session),
        expires_at: Some(expires_at),
        // Revoking the token the session was opened with ends the session.
        parent: Some(principal.token_id),
    };
    if let Err(err) = state.store.create_token(&new).await {
        return error_page(err.into());
    }
    tracing::info!(user.id = %principal.user.id, "dashboard session started");
    let mut response = see_other(&next);
    set_cookie(
        &mut response,
        &headers,
        &session,
        (expires_at - now).num_seconds().max(1),
    );
    response
}

fn refused(state: &AppState, next: &str, error: &str) -> Response {
    let page = LoginPage {
        next: next.to_owned(),
        error: Some(error.to_owned()),
        notice: None,
        sso: sso_name(state),
    };
    (StatusCode::UNAUTHORIZED, render(&page)).into_response()
}

/// The session cookie: Secure when the request came over HTTPS (directly or through a proxy).
fn set_cookie(response: &mut Response, headers: &HeaderMap, value: &str, max_age: i64) {
    let secure = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let cookie = format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        auth::SESSION_COOKIE,
        if secure { "; Secure" } else { "" }
    );
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
}

/// `GET /login/sso`: sends the browser to the identity provider, to come back to `next`.
pub async fn sso_start(State(state): State<AppState>, Query(query): Query<LoginQuery>) -> Response {
    let next = safe_next(query.next.as_deref());
    match sso::begin(&state, &next).await {
        Ok(url) => see_other(&url),
        Err(err) if err.kind == drover_service::ErrorKind::NotFound => {
            refused(&state, &next, &err.message)
        }
        Err(err) => refused(
            &state,
            &next,
            &format!(
                "cannot sign in through the identity provider now: {}",
                err.message
            ),
        ),
    }
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /login/sso/callback`: where the provider sends the browser back. The session cookie is set
/// on a page that then moves to where the sign-in started: a redirect straight there would still
/// belong to the provider's cross-site navigation, which a SameSite=Strict cookie does not join.
pub async fn sso_callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    if let Some(error) = &query.error {
        let why = query.error_description.as_deref().unwrap_or(error);
        let why: String = why.chars().take(200).collect();
        return refused(
            &state,
            "/",
            &format!("the identity provider did not sign you in: {why}"),
        );
    }
    let (Some(sso_state), Some(code)) = (query.state.as_deref(), query.code.as_deref()) else {
        return refused(
            &state,
            "/",
            "the identity provider's answer lacked `state` or `code`; sign in again",
        );
    };
    let signed_in = match sso::finish(&state, sso_state, code).await {
        Ok(signed_in) => signed_in,
        Err(err) if err.is_client_error() => {
            return refused(&state, "/", &format!("sign-in refused: {}", err.message));
        }
        Err(err) => return error_page(err.into()),
    };
    let next = safe_next(Some(&signed_in.next));
    let mut response = render(&Landing { next });
    set_cookie(
        &mut response,
        &headers,
        &signed_in.token,
        (signed_in.expires_at - Utc::now()).num_seconds().max(1),
    );
    response
}

#[derive(askama::Template)]
#[template(path = "landing.html")]
struct Landing {
    next: String,
}

#[derive(Debug, Deserialize)]
struct LogoutForm {
    #[serde(rename = "_csrf")]
    csrf: String,
}

pub async fn logout(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let valid = serde_urlencoded::from_bytes::<LogoutForm>(&body)
        .ok()
        .zip(auth::session_cookie(&headers))
        .is_some_and(|(form, cookie)| auth::csrf_matches(cookie, &form.csrf));
    if !valid || cross_site(&headers) {
        return (
            StatusCode::FORBIDDEN,
            "sign-out needs the page's CSRF token",
        )
            .into_response();
    }
    if let Err(err) = state.store.revoke_token(session.principal.token_id).await {
        return error_page(err.into());
    }
    state.tokens.forget_all();
    let mut response = to_login("/", Some("signed out"));
    set_cookie(&mut response, &headers, "", 0);
    response
}
