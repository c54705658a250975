//! Drover's control plane: the store (Postgres and SQLite), authentication and tenancy, and the REST API.

pub mod store;
