//! What the HTTP handlers share: the [`Service`] every entrance calls, and what only HTTP needs (the
//! largest body accepted, the per-token request buckets).

use drover_runtime::Runtime;
use drover_runtime::limits::{Buckets, Limits};
use drover_service::Service;
use drover_store::Store;
use drover_store::secrets::SecretBox;
use std::ops::Deref;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct AppState {
    pub service: Service,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// API requests, per token (by its hash).
    pub request_buckets: Arc<Buckets<[u8; 32]>>,
}

impl AppState {
    pub fn new(store: Arc<dyn Store>, max_body_bytes: usize) -> Self {
        Self {
            service: Service::new(store),
            max_body_bytes,
            request_buckets: Arc::new(Buckets::new(Limits::NONE.requests)),
        }
    }

    /// The same state, told when the server stops. Call before the state is shared.
    pub fn with_shutdown(self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            service: self.service.with_shutdown(stopping),
            ..self
        }
    }

    /// The same state, enforcing these limits. Call before the state is shared.
    pub fn with_limits(self, limits: Limits) -> Self {
        Self {
            service: self.service.with_limits(limits),
            request_buckets: Arc::new(Buckets::new(limits.requests)),
            ..self
        }
    }

    /// The same state, with the key that seals tenant secrets. Call before the state is shared.
    pub fn with_secrets(self, secrets: Arc<SecretBox>) -> Self {
        Self {
            service: self.service.with_secrets(secrets),
            ..self
        }
    }

    /// The same state, signing users in through an identity provider. Call before the state is
    /// shared.
    pub fn with_sso(self, sso: Arc<drover_service::sso::Sso>) -> Self {
        Self {
            service: self.service.with_sso(sso),
            ..self
        }
    }

    /// The same state, with the runtime that runs jobs. Call before the state is shared.
    pub fn with_runtime(self, runtime: Arc<Runtime>) -> Self {
        Self {
            service: self.service.with_runtime(runtime),
            ..self
        }
    }
}

impl Deref for AppState {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.service
    }
}
