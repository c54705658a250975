//! What every page shares: the frame around it ([`Layout`]), how it is answered ([`render`], with the
//! headers every page carries, [`PAGE_HEADERS`]), the page an API error becomes ([`error_page`]), and
//! what form posts rely on (the cross-site check, [`cross_site`], and the redirect after a post,
//! [`see_other`]).

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use drover_api::error::ApiError;

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
