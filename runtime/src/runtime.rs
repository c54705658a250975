//! [`Runtime`]: the state the scheduling loop, the executor gateway and the reconciliation share —
//! the store, the connected executors ([`Hub`]), the configuration, each job's observations, the
//! per-tenant report buckets, the experiment driver's hints, whether this replica leads, and the
//! active jobs' documents as last read. Its behaviour lives by role in the modules beside it, as
//! functions over a `&Runtime`: `dispatch` and `settle` (reconciling a job's intent with what its
//! tasks report), `reports` (what executors send), `enrol` (trusting executors), `gateway` (their
//! sessions), `scheduling` (the loop).

use crate::hints::SearchHints;
use crate::hub::Hub;
use crate::ingest::Ingest;
use crate::limits;
use crate::observe::{Observer, ParsedSpec};
use crate::{checkpoint_store, leader};
use drover_store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the runtime behaves; one typed struct, from the server's flags.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// A name from the scheduler's policy registry.
    pub policy: String,
    /// The scheduling loop runs at least this often (and whenever something changes).
    pub tick: Duration,
    /// An executor not heard from for this long is lost, and its jobs go back to `queued`.
    pub executor_timeout: Duration,
    /// Executors send a heartbeat this often.
    pub heartbeat_interval: Duration,
    /// How long a stopping task may take to checkpoint before it is killed.
    pub stop_grace: Duration,
    /// Checkpoint storage: a directory every executor can reach (absolute), or an object store's
    /// URL (`s3://bucket/prefix`, then `checkpoint_store` is set).
    pub checkpoint_root: PathBuf,
    /// The object store checkpoints go to, when they do not go to a directory.
    pub checkpoint_store: Option<Arc<checkpoint_store::ObjectStorage>>,
    /// The server's own enrolment token (`--enrollment-token`): reusable, for fleets that enrol
    /// executors as they come (a DaemonSet). `None`: only tokens minted through the API enrol.
    pub enrollment_token: Option<String>,
    /// How much each tenant's tasks may report (log lines, metric samples).
    pub limits: limits::Limits,
    /// Where executors reach this replica's gateway, told to them when another replica redirects
    /// them here; derived from the gateway's address when `None`.
    pub advertise_gateway: Option<String>,
    /// Opens tenant secrets for the tasks that need them; `None`: jobs with secrets cannot start.
    pub secrets: Option<Arc<drover_store::secrets::SecretBox>>,
    /// How long the leader keeps log lines and ended jobs' metric samples.
    pub retention: crate::retention::Retention,
    /// Mutual TLS on the gateway (set by the server once its listener is configured): sessions
    /// need a client certificate of the node, and enrolment issues one. `None`: plain gRPC.
    pub gateway_tls: Option<Arc<crate::tls::authority::GatewayTls>>,
}

impl RuntimeConfig {
    pub fn new(policy: &str, checkpoint_root: PathBuf) -> Self {
        Self {
            policy: policy.to_owned(),
            tick: Duration::from_secs(1),
            executor_timeout: Duration::from_secs(15),
            heartbeat_interval: Duration::from_secs(2),
            stop_grace: Duration::from_secs(30),
            checkpoint_root,
            checkpoint_store: None,
            enrollment_token: None,
            secrets: None,
            advertise_gateway: None,
            limits: limits::Limits::NONE,
            retention: crate::retention::Retention::default(),
            gateway_tls: None,
        }
    }
}

/// State shared by the gateway's sessions and the scheduling loop.
#[derive(Debug)]
pub struct Runtime {
    pub store: Arc<dyn Store>,
    pub hub: Hub,
    /// What was applied of each executor's numbered reports.
    pub applied: crate::applied::AppliedReports,
    pub config: RuntimeConfig,
    /// Each job's aggregated speed and loss samples.
    pub observer: Observer,
    /// Per-tenant ingestion rates.
    pub ingest: Ingest,
    /// Refused enrolments, cluster-wide: 1 a second, bursts of 20.
    pub failed_enrolments: limits::Buckets<()>,
    /// The experiment driver's outlook on trial jobs, for the scheduling loop.
    pub search_hints: SearchHints,
    /// Whether this replica leads (runs the loop and the executors' sessions).
    pub leader: tokio::sync::watch::Receiver<bool>,
    /// The documents of active jobs as last read, with their versions: a round reads only those of
    /// jobs that are new or whose document changed (a resize), not of every job whose state did.
    documents: std::sync::Mutex<std::collections::HashMap<drover_core::JobId, CachedDocument>>,
    /// How long each scheduling round took, whole (store reads, planning, writes, dispatch), served
    /// with the server's metrics as `drover_scheduling_round_seconds`.
    pub round_seconds: prometheus_client::metrics::histogram::Histogram,
}

/// A job's document at a version ([`drover_store::Job::document_version`]), and its spec parsed
/// once (with its program).
type CachedDocument = (u64, Arc<serde_json::Value>, Option<ParsedSpec>);

impl Runtime {
    /// A runtime that always leads (one server).
    pub fn new(store: Arc<dyn Store>, config: RuntimeConfig) -> Arc<Self> {
        Self::replica(store, config, leader::always())
    }

    /// A runtime that leads while `leader` says so.
    pub fn replica(
        store: Arc<dyn Store>,
        config: RuntimeConfig,
        leader: tokio::sync::watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            leader,
            documents: std::sync::Mutex::new(std::collections::HashMap::new()),
            store,
            hub: Hub::new(),
            applied: crate::applied::AppliedReports::default(),
            ingest: Ingest::new(&config.limits),
            failed_enrolments: limits::Buckets::new(limits::Rate {
                per_second: 1.0,
                burst: 20.0,
            }),
            config,
            observer: Observer::default(),
            search_hints: SearchHints::default(),
            // 1 ms to 11.6 s, each bucket √2 times the last: a quantile read from them is within
            // 41% of the truth, and finer where the rounds are.
            round_seconds: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(
                    0.001,
                    std::f64::consts::SQRT_2,
                    28,
                ),
            ),
        })
    }

    /// Attaches their documents to these job rows, reading from the store only those of jobs that
    /// are new or changed since they were last read (a queue of thousands costs nothing a round).
    pub(crate) async fn attach_documents(
        &self,
        jobs: &mut [drover_store::Job],
    ) -> drover_store::StoreResult<()> {
        let missing: Vec<drover_core::JobId> = {
            let cache = self.cached_documents();
            jobs.iter()
                .filter(|j| {
                    cache
                        .get(&j.id)
                        .is_none_or(|(version, _, _)| *version != j.document_version)
                })
                .map(|j| j.id)
                .collect()
        };
        let fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.store.job_documents(&missing).await?
        };
        let tenants: std::collections::HashMap<drover_core::JobId, drover_core::TenantId> =
            jobs.iter().map(|j| (j.id, j.tenant_id)).collect();
        let mut cache = self.cached_documents();
        for (id, version, document) in fetched {
            let spec = drover_store::spec_of(&document)
                .zip(tenants.get(&id))
                .map(|(spec, tenant)| ParsedSpec::of(spec, *tenant));
            cache.insert(id, (version, Arc::new(document), spec));
        }
        for job in jobs {
            job.document = cache.get(&job.id).map(|(_, document, _)| document.clone());
        }
        Ok(())
    }

    /// Forgets the documents of jobs no longer active.
    pub(crate) fn keep_documents(&self, active: impl Fn(&drover_core::JobId) -> bool) {
        self.cached_documents().retain(|id, _| active(id));
    }

    /// The parsed specs of these jobs and their programs, as cached by [`Runtime::attach_documents`];
    /// parsed now when not.
    pub(crate) fn specs(
        &self,
        jobs: &[drover_store::Job],
    ) -> std::collections::HashMap<drover_core::JobId, ParsedSpec> {
        let cache = self.cached_documents();
        jobs.iter()
            .filter_map(|job| {
                let cached = cache
                    .get(&job.id)
                    .filter(|(version, _, _)| *version == job.document_version)
                    .and_then(|(_, _, spec)| spec.clone());
                let spec = cached.or_else(|| Some(ParsedSpec::of(job.spec()?, job.tenant_id)))?;
                Some((job.id, spec))
            })
            .collect()
    }

    fn cached_documents(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<drover_core::JobId, CachedDocument>>
    {
        self.documents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Where generation `generation` of `job` writes its checkpoints.
    pub fn checkpoint_dir(&self, job: drover_core::JobId, generation: u64) -> PathBuf {
        self.config
            .checkpoint_root
            .join(job.0.to_string())
            .join(format!("g{generation}"))
    }

    /// Whether a recorded checkpoint is still in the storage; `None` when this server cannot tell
    /// (an object store that does not answer; a checkpoint directory it does not see).
    pub async fn checkpoint_exists(&self, record: &drover_store::CheckpointRecord) -> Option<bool> {
        match &self.config.checkpoint_store {
            Some(store) => match store.entries(&record.path, record.job_id).await {
                Ok(found) => Some(found.is_some()),
                Err(err) => {
                    tracing::warn!(path = record.path, error = %err, "cannot look for a checkpoint in the object store");
                    None
                }
            },
            None => {
                let root = tokio::fs::try_exists(&self.config.checkpoint_root).await;
                if !matches!(root, Ok(true)) {
                    return None;
                }
                tokio::fs::try_exists(&record.path).await.ok()
            }
        }
    }
}
