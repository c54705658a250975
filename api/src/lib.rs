//! Drover's REST API, HTTP only: the router ([`routes::app`], one module per resource), thin handlers
//! that authenticate, parse, call `drover_service` and answer; the extractors whose failures speak the
//! API's error format; the mapping from the service's typed errors to statuses ([`error`]); the
//! JSON views; the OpenAPI document; and the request middleware (rate limits, metrics). The server's
//! composition root (the `drover` binary's `serve::server`) builds the [`state::AppState`] and serves
//! [`routes::app_with`] together with the dashboard's pages.

pub mod attachment;
pub mod auth;
pub mod error;
pub mod experiment_views;
pub mod extract;
pub mod middleware;
pub mod paging;
pub mod request_metrics;
pub mod routes;
pub mod run_views;
pub mod state;
pub mod views;

pub use routes::app;
pub use state::AppState;
