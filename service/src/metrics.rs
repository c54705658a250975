//! The server's Prometheus metrics (served at `/metrics` by the API): requests, job submissions and
//! state changes, the jobs in the store by state, and the scheduling loop's round times. Label values
//! come from enums or route templates, never from user input, so cardinality is bounded.

use drover_core::JobState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// One of a fixed set of method names (`OTHER` for the rest).
    method: &'static str,
    /// The matched route template (`/api/v1/jobs/{id}`), or `unmatched`.
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    jobs_submitted: Counter,
    transitions: Family<StateLabels, Counter>,
    jobs: Family<StateLabels, Gauge>,
    /// When the job gauge was last read from the store.
    counted_at: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let mut metrics = Self {
            registry: Arc::default(),
            requests,
            latency,
            jobs_submitted: Counter::default(),
            transitions: Family::default(),
            jobs: Family::default(),
            counted_at: Arc::default(),
        };
        metrics.registry = Arc::new(metrics.registry_with(None));
        metrics
    }

    /// The same metrics, served with the scheduling loop's round times (a server that runs jobs).
    pub fn with_rounds(mut self, rounds: &Histogram) -> Self {
        self.registry = Arc::new(self.registry_with(Some(rounds)));
        self
    }

    fn registry_with(&self, rounds: Option<&Histogram>) -> Registry {
        let mut registry = Registry::with_prefix("drover");
        registry.register(
            "http_requests",
            "HTTP requests served",
            self.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            self.latency.clone(),
        );
        registry.register(
            "jobs_submitted",
            "Jobs accepted (idempotent replays not counted)",
            self.jobs_submitted.clone(),
        );
        registry.register(
            "job_transitions",
            "Job state changes made through this server, by new state",
            self.transitions.clone(),
        );
        registry.register(
            "jobs",
            "Jobs in the store, by state (read at scrape time, at most every 5 s)",
            self.jobs.clone(),
        );
        if let Some(rounds) = rounds {
            registry.register(
                "scheduling_round_seconds",
                "Scheduling rounds of this replica while it leads, whole (store reads, planning, writes, dispatch)",
                rounds.clone(),
            );
        }
        registry
    }

    /// Scrapes need no token, so the job gauge is read from the store at most every
    /// [`Metrics::COUNT_EVERY`] (a scrape in between shows the last reading): whether one is due
    /// now, and if so it counts as taken.
    pub fn job_count_due(&self) -> bool {
        let mut at = self.counted_at.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_some_and(|at| at.elapsed() < Self::COUNT_EVERY) {
            return false;
        }
        *at = Some(Instant::now());
        true
    }

    pub const COUNT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn job_submitted(&self) {
        self.jobs_submitted.inc();
    }

    pub fn job_transition(&self, to: JobState) {
        self.transitions
            .get_or_create(&StateLabels { state: to.as_str() })
            .inc();
    }

    /// Sets the per-state job gauge (every state, zeros included) before a scrape.
    pub fn set_job_counts(&self, counts: &[(JobState, i64)]) {
        for state in JobState::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| *s == state)
                .map_or(0, |(_, n)| *n);
            self.jobs
                .get_or_create(&StateLabels {
                    state: state.as_str(),
                })
                .set(n);
        }
    }

    /// Counts one HTTP request to `route` (a route template, never the path a client sent) and its
    /// latency.
    pub fn observe_request(&self, method: &'static str, route: String, status: u16, seconds: f64) {
        self.latency
            .get_or_create(&RouteLabels {
                route: route.clone(),
            })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route,
                status,
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %err, "encoding metrics failed");
        }
        out
    }
}
