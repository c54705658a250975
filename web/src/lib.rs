//! The dashboard: server-rendered pages mounted by `drover server` (and so `drover dev`) at `/`.
//!
//! Pages are views of the data the REST API returns: their handlers call the API's own handlers and
//! store queries with the caller's [`Principal`](drover_service::auth::Principal), so a page shows
//! exactly what the API would show that caller, scoped and authorised the same way. A browser signs
//! in once with an API token, which is exchanged for a session of its own (an HttpOnly,
//! SameSite=Strict cookie: `session.rs`); forms and the page script carry the session's CSRF token.
//! Buttons call the REST API itself with the cookie and show its error text when it refuses. Live
//! pages follow one server-sent-event stream each. What every page shares (its frame, rendering,
//! error pages) is in `page.rs`; this root only wires the routes and serves the static files.

mod charts;
mod cluster;
mod compare;
mod experiments;
mod job;
mod jobs;
mod live;
mod logs;
mod overview;
mod page;
mod series;
mod session;
mod submit;
mod time;

pub use drover_plot::{Chart, Series, XAxis, lttb, smooth};
pub use page::{Layout, PAGE_HEADERS, cross_site, error_page, render, see_other};
pub use session::Session;
pub use time::{Time, duration, timestamp};

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use drover_api::state::AppState;

/// The dashboard's routes, to merge into the API's router.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::page))
        .route("/login", get(session::login_page).post(session::login))
        .route("/login/sso", get(session::sso_start))
        .route("/login/sso/callback", get(session::sso_callback))
        .route("/logout", post(session::logout))
        .route("/jobs", get(jobs::page))
        .route("/jobs/live", get(live::jobs))
        .route("/jobs/{id}", get(job::page))
        .route("/jobs/{id}/chart", get(charts::chart))
        .route("/jobs/{id}/live", get(live::job))
        .route("/jobs/{id}/logs", get(logs::page))
        .route("/compare", get(compare::page))
        .route("/experiments", get(experiments::list))
        .route("/experiments/{id}", get(experiments::page))
        .route("/queue", get(cluster::queue))
        .route("/queue/live", get(live::queue))
        .route("/nodes", get(cluster::nodes))
        .route("/tenants", get(cluster::tenants))
        .route("/submit", get(submit::page).post(submit::submit))
        .route("/static/app.css", get(stylesheet))
        .route("/static/app.js", get(script))
        .route("/static/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
}

const CSS: &str = include_str!("../static/app.css");
const JS: &str = include_str!("../static/app.js");
const FAVICON: &str = include_str!("../static/favicon.svg");

async fn stylesheet() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

async fn favicon() -> Response {
    asset(FAVICON, "image/svg+xml")
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
