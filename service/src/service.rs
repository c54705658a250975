//! [`Service`]: what the operations work with — the store, the runtime when this server runs jobs,
//! the key that seals tenant secrets, the limits, the process's metrics, and the per-process state
//! every entrance shares (group commit, the token cache, open streams).

use crate::capacity::Capacity;
use crate::metrics::Metrics;
use crate::sso::provider::Sso;
use crate::streams::Streams;
use crate::submissions::Submissions;
use crate::token_cache::TokenCache;
use drover_runtime::Runtime;
use drover_runtime::limits::Limits;
use drover_store::Store;
use drover_store::secrets::SecretBox;
use std::ops::Deref;
use std::sync::Arc;

/// What the operations work with; cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Service(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub store: Arc<dyn Store>,
    pub metrics: Metrics,
    /// The executor gateway and scheduling loop, when this server runs jobs.
    pub runtime: Option<Arc<Runtime>>,
    /// Seals tenant secrets; `None`: this server keeps no secrets.
    pub secrets: Option<Arc<SecretBox>>,
    pub limits: Limits,
    /// Turns true when the server stops: long operations (followed logs) end so it can.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Job submissions, stored in shared transactions (group commit).
    pub submissions: Arc<Submissions>,
    /// Tokens recently found valid.
    pub tokens: Arc<TokenCache>,
    /// Long-lived streams (followed logs, live pages) open, per user.
    pub streams: Arc<Streams>,
    /// The nodes, as submissions are checked against them.
    pub capacity: Arc<Capacity>,
    /// Single sign-on through the company's identity provider, when configured.
    pub sso: Option<Arc<Sso>>,
}

impl Service {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self(Arc::new(Inner {
            store,
            metrics: Metrics::new(),
            runtime: None,
            secrets: None,
            limits: Limits::NONE,
            stopping: tokio::sync::watch::channel(false).1,
            submissions: Arc::default(),
            tokens: Arc::default(),
            streams: Arc::default(),
            capacity: Arc::default(),
            sso: None,
        }))
    }

    /// The same service, told when the server stops. Call before the service is shared.
    pub fn with_shutdown(self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(Inner { stopping, ..inner }))
    }

    /// The same service, enforcing these limits. Call before the service is shared.
    pub fn with_limits(self, limits: Limits) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(Inner { limits, ..inner }))
    }

    /// The same service, with the key that seals tenant secrets. Call before the service is shared.
    pub fn with_secrets(self, secrets: Arc<SecretBox>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(Inner {
            secrets: Some(secrets),
            ..inner
        }))
    }

    /// The same service, with the runtime that runs jobs. Call before the service is shared.
    pub fn with_runtime(self, runtime: Arc<Runtime>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(Inner {
            metrics: inner.metrics.clone().with_rounds(&runtime.round_seconds),
            runtime: Some(runtime),
            ..inner
        }))
    }

    /// The same service, signing users in through an identity provider. Call before the service
    /// is shared.
    pub fn with_sso(self, sso: Arc<Sso>) -> Self {
        let inner = self.into_inner();
        Self(Arc::new(Inner {
            sso: Some(sso),
            ..inner
        }))
    }

    fn into_inner(self) -> Inner {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| Inner {
            store: shared.store.clone(),
            metrics: shared.metrics.clone(),
            runtime: shared.runtime.clone(),
            secrets: shared.secrets.clone(),
            limits: shared.limits,
            stopping: shared.stopping.clone(),
            submissions: shared.submissions.clone(),
            tokens: shared.tokens.clone(),
            streams: shared.streams.clone(),
            capacity: shared.capacity.clone(),
            sso: shared.sso.clone(),
        })
    }

    /// Wakes the scheduling loop (after a submission or a cancel).
    pub fn wake_scheduler(&self) {
        if let Some(runtime) = &self.runtime {
            runtime.hub.wake.notify_one();
        }
    }
}

impl Deref for Service {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
