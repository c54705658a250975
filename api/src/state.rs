//! Shared state of the HTTP handlers.

use crate::metrics::Metrics;
use crate::store::Store;
use std::ops::Deref;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct AppState(Arc<AppInner>);

#[derive(Debug)]
pub struct AppInner {
    pub store: Arc<dyn Store>,
    pub metrics: Metrics,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl AppState {
    pub fn new(store: Arc<dyn Store>, max_body_bytes: usize) -> Self {
        Self(Arc::new(AppInner {
            store,
            metrics: Metrics::new(),
            max_body_bytes,
        }))
    }
}

impl Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}
