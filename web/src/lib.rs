//! The dashboard: server-rendered pages mounted by `drover server` (and so `drover dev`) at `/`.
//!
//! Pages are views of the data the REST API returns: their handlers call the API's own handlers and
//! store queries with the caller's [`Principal`], so a page shows exactly what the API would show
//! that caller, scoped and authorised the same way. A browser signs in once with an API token, which
//! is exchanged for a session of its own (an HttpOnly, SameSite=Strict cookie); forms and the page
//! script carry the session's CSRF token. Buttons call the REST API itself with the cookie and show
//! its error text when it refuses. Live pages follow one server-sent-event stream each.

mod chart;
mod cluster;
mod experiments;
mod job;
mod jobs;
mod live;
mod overview;
mod series;
mod session;
mod submit;

pub use chart::{Chart, Series, XAxis, lttb, smooth};

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use drover_api::auth::{self, Principal};
use drover_api::error::ApiError;
use drover_api::state::AppState;

/// The dashboard's routes, to merge into the API's router.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::page))
        .route("/login", get(session::login_page).post(session::login))
        .route("/logout", post(session::logout))
        .route("/jobs", get(jobs::page))
        .route("/jobs/live", get(live::jobs))
        .route("/jobs/{id}", get(job::page))
        .route("/jobs/{id}/chart", get(job::chart))
        .route("/jobs/{id}/live", get(live::job))
        .route("/experiments", get(experiments::list))
        .route("/experiments/{id}", get(experiments::page))
        .route("/queue", get(cluster::queue))
        .route("/nodes", get(cluster::nodes))
        .route("/tenants", get(cluster::tenants))
        .route("/submit", get(submit::page).post(submit::submit))
        .route("/static/app.css", get(stylesheet))
        .route("/static/app.js", get(script))
}

const CSS: &str = include_str!("../static/app.css");
const JS: &str = include_str!("../static/app.js");

async fn stylesheet() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

async fn script() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

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
            return Err(session::to_login(&back, None));
        };
        match Principal::from_token(state, token).await {
            Ok(principal) => Ok(Session {
                principal,
                csrf: auth::csrf_token(token),
            }),
            Err(err) if err.status == StatusCode::UNAUTHORIZED => Err(session::to_login(
                &back,
                Some("your session ended; sign in again"),
            )),
            Err(err) => Err(error_page(err)),
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

/// What the frame around every page shows.
#[derive(Debug, Clone)]
pub struct Layout {
    pub user: String,
    pub tenant: String,
    pub role: String,
    pub csrf: String,
    /// The navigation entry to mark current.
    pub active: &'static str,
    pub admin: bool,
}

impl Layout {
    pub fn is(&self, entry: &str) -> bool {
        self.active == entry
    }
}

#[derive(askama::Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    title: String,
    message: String,
}

/// An API error as a page: its status, and its message (never internals: the API already hides them).
pub fn error_page(err: ApiError) -> Response {
    let page = ErrorPage {
        status: err.status.as_u16(),
        title: err.status.canonical_reason().unwrap_or("Error").to_owned(),
        message: err.message,
    };
    (err.status, render(&page)).into_response()
}

/// What every page says about itself: scripts and styles only from this server (no inline script
/// runs, whatever a page shows), never framed by another site, never sniffed, no referrer sent to
/// another site ("no-referrer" would make the browser send `Origin: null` on our own forms).
pub const PAGE_HEADERS: [(header::HeaderName, &str); 5] = [
    (header::CACHE_CONTROL, "no-store"),
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "same-origin"),
];

/// Renders a template; a template that fails to render is a bug, answered with a plain 500.
pub fn render(template: &impl askama::Template) -> Response {
    match template.render() {
        Ok(html) => (PAGE_HEADERS, Html(html)).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "rendering a page failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be drawn",
            )
                .into_response()
        }
    }
}

/// A form post from another site: refused (the session cookie is SameSite=Strict, and this also
/// covers the login form, which has no session yet).
pub fn cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(fetch_site, Some("cross-site" | "same-site")) {
        return true;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        host,
    ) {
        (Some("null"), _) => true,
        (Some(origin), Some(host)) => {
            let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            origin_host != host
        }
        _ => false,
    }
}

/// A redirect after a form post.
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// Formats a time for a `<time>` element: the script shows it in the browser's zone, relative.
pub fn timestamp(at: chrono::DateTime<chrono::Utc>) -> Time {
    Time {
        iso: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        text: at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    }
}

/// A point in time as a page shows it.
#[derive(Debug, Clone)]
pub struct Time {
    pub iso: String,
    pub text: String,
}

/// A duration in the largest sensible unit (`3 h 12 min`, `45 s`).
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "—".to_owned();
    }
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}
