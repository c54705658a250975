//! What every reconciler shares, below all of them: the controller's [`Settings`], the [`Context`]
//! each reconcile gets, the [`Error`] a reconcile ends with and how it is retried
//! ([`error_policy`]), and the `kubernetes` user ([`CONTROLLER_USER`]) Kubernetes acts as.

use drover_core::JobId;
use drover_service::Service;
use drover_service::ServiceError;
use drover_store::StoreError;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// The user, in each tenant, that jobs from Kubernetes are submitted as.
pub const CONTROLLER_USER: &str = "kubernetes";
/// The namespace label that names a namespace's tenant, by default.
pub const DEFAULT_TENANT_LABEL: &str = "drover.dev/tenant";

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespace label that names the tenant.
    pub tenant_label: String,
    /// How often an active job's status is refreshed.
    pub resync: Duration,
    /// How long to wait before trying again after a problem the user must fix (unknown tenant,
    /// over quota, name taken).
    pub retry: Duration,
    /// The Event reporter's instance (the pod's name).
    pub instance: String,
    /// Make objects for jobs submitted over REST too (in their tenant's namespace).
    pub mirror: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenant_label: DEFAULT_TENANT_LABEL.to_owned(),
            resync: Duration::from_secs(5),
            retry: Duration::from_secs(30),
            instance: String::new(),
            mirror: false,
        }
    }
}

/// What each reconcile needs.
pub struct Context {
    pub service: Service,
    pub client: Client,
    pub recorder: Recorder,
    pub settings: Settings,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(service: Service, client: Client, settings: Settings) -> Arc<Self> {
        let reporter = Reporter {
            controller: "drover".to_owned(),
            instance: (!settings.instance.is_empty()).then(|| settings.instance.clone()),
        };
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            service,
            client,
            settings,
        })
    }
}

/// Why a reconcile did not finish; the object is tried again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Api(String),
    #[error("job {0} is cancelled; waiting for its tasks to stop")]
    Settling(JobId),
    /// Drover refused what the object asks for; tried again slowly.
    #[error("{0}")]
    Refused(String),
    #[error("the finalizer: {0}")]
    Finalizer(String),
}

impl From<ServiceError> for Error {
    fn from(err: ServiceError) -> Self {
        Error::Api(format!("{}: {}", err.code, err.message))
    }
}

/// Tries a failed reconcile again (of either kind): soon for an object whose job or trials are
/// settling, later for anything else.
pub fn error_policy<K: kube::Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    _ctx: Arc<Context>,
) -> Action {
    match err {
        Error::Settling(_) => Action::requeue(Duration::from_secs(2)),
        Error::Refused(_) => Action::requeue(Duration::from_secs(60)),
        other => {
            tracing::warn!(kind = %K::kind(&()), object = %obj.name_any(), namespace = obj.namespace().unwrap_or_default(), error = %other, "reconcile failed; retrying");
            Action::requeue(Duration::from_secs(10))
        }
    }
}
