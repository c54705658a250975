//! Shared state of the HTTP handlers.

use crate::auth::TokenCache;
use crate::cluster::Runtime;
use crate::limits::{Buckets, Limits};
use crate::metrics::Metrics;
use crate::secrets::SecretBox;
use crate::store::Store;
use crate::submissions::Submissions;
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
    /// The executor gateway and scheduling loop, when this server runs jobs.
    pub runtime: Option<Arc<Runtime>>,
    /// Seals tenant secrets; `None`: this server keeps no secrets.
    pub secrets: Option<Arc<SecretBox>>,
    pub limits: Limits,
    /// API requests, per token (by its hash).
    pub request_buckets: Arc<Buckets<[u8; 32]>>,
    /// Turns true when the server stops: long requests (followed logs) end so it can.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Job submissions, stored in shared transactions (group commit).
    pub submissions: Arc<Submissions>,
    /// Tokens recently found valid.
    pub tokens: Arc<TokenCache>,
    /// Long-lived streams (followed logs) open, per user.
    pub streams: Arc<crate::streams::Streams>,
}

impl AppState {
    pub fn new(store: Arc<dyn Store>, max_body_bytes: usize) -> Self {
        Self(Arc::new(AppInner {
            store,
            metrics: Metrics::new(),
            max_body_bytes,
            runtime: None,
            secrets: None,
            limits: Limits::NONE,
            request_buckets: Arc::new(Buckets::new(Limits::NONE.requests)),
            stopping: tokio::sync::watch::channel(false).1,
            submissions: Arc::default(),
            tokens: Arc::default(),
            streams: Arc::default(),
        }))
    }

    /// The same state, told when the server stops. Call before the state is shared.
    pub fn with_shutdown(self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(AppInner { stopping, ..inner }))
    }

    /// The same state, enforcing these limits. Call before the state is shared.
    pub fn with_limits(self, limits: Limits) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(AppInner {
            limits,
            request_buckets: Arc::new(Buckets::new(limits.requests)),
            ..inner
        }))
    }

    /// The same state, with the key that seals tenant secrets. Call before the state is shared.
    pub fn with_secrets(self, secrets: Arc<SecretBox>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(AppInner {
            secrets: Some(secrets),
            ..inner
        }))
    }

    fn into_inner(self) -> AppInner {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| AppInner {
            store: shared.store.clone(),
            metrics: shared.metrics.clone(),
            max_body_bytes: shared.max_body_bytes,
            runtime: shared.runtime.clone(),
            secrets: shared.secrets.clone(),
            limits: shared.limits,
            request_buckets: shared.request_buckets.clone(),
            stopping: shared.stopping.clone(),
            submissions: shared.submissions.clone(),
            tokens: shared.tokens.clone(),
            streams: shared.streams.clone(),
        })
    }

    /// The same state, with the runtime that runs jobs. Call before the state is shared.
    pub fn with_runtime(self, runtime: Arc<Runtime>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(AppInner {
            runtime: Some(runtime),
            ..inner
        }))
    }

    /// Wakes the scheduling loop (after a submission or a cancel).
    pub fn wake_scheduler(&self) {
        if let Some(runtime) = &self.runtime {
            runtime.hub.wake.notify_one();
        }
    }
}

impl Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}
