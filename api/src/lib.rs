//! Drover's control plane: the store (Postgres and SQLite), authentication and tenancy, and the REST API.
//!
//! [`routes::app`] builds the whole HTTP application from an [`state::AppState`]; [`server::start`] opens
//! the store, migrates, makes sure a cluster administrator exists and serves.

pub mod accounting;
pub mod audit;
pub mod auth;
pub mod checkpoint_files;
pub mod checkpoint_store;
pub mod cluster;
pub mod error;
pub mod experiment_views;
pub mod experiments;
pub mod extract;
pub mod kubernetes;
pub mod limits;
pub mod metrics;
pub mod model_views;
pub mod routes;
pub mod run_views;
pub mod secrets;
pub mod server;
pub mod state;
pub mod store;
pub mod streams;
pub mod submissions;
pub mod testing;
pub mod views;

pub use routes::app;
pub use state::AppState;
