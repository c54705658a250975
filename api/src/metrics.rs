//! Prometheus metrics at `/metrics`. Label values come from enums or route templates, never from user
//! input, so cardinality is bounded.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use drover_core::JobState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;

use crate::state::AppState;

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

/// A tenant's figure of one kind; tenants beyond [`MAX_TENANT_SERIES`] are summed under `_other`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    kind: &'static str,
}

/// Tenants with series of their own at most (the largest by GPU-hours allocated).
pub const MAX_TENANT_SERIES: usize = 50;
/// How often the per-tenant figures are recomputed (scrapes in between read the last ones).
const TENANT_REFRESH: std::time::Duration = std::time::Duration::from_secs(60);

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    jobs_submitted: Counter,
    transitions: Family<StateLabels, Counter>,
    jobs: Family<StateLabels, Gauge>,
    tenant_gpus: Family<TenantLabels, FloatGauge>,
    tenant_gpu_hours: Family<TenantLabels, FloatGauge>,
    tenants_at: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("drover");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests served", requests.clone());
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            latency.clone(),
        );
        let jobs_submitted = Counter::default();
        registry.register(
            "jobs_submitted",
            "Jobs accepted (idempotent replays not counted)",
            jobs_submitted.clone(),
        );
        let transitions = Family::<StateLabels, Counter>::default();
        registry.register(
            "job_transitions",
            "Job state changes made through this server, by new state",
            transitions.clone(),
        );
        let jobs = Family::<StateLabels, Gauge>::default();
        registry.register(
            "jobs",
            "Jobs in the store, by state (read at scrape time)",
            jobs.clone(),
        );
        let tenant_gpus = Family::<TenantLabels, FloatGauge>::default();
        registry.register(
            "tenant_gpus",
            "GPUs per tenant now, by kind: guaranteed, held, borrowed (held beyond the guarantee), lent (guaranteed but idle while others borrow)",
            tenant_gpus.clone(),
        );
        let tenant_gpu_hours = Family::<TenantLabels, FloatGauge>::default();
        registry.register(
            "tenant_gpu_hours_24h",
            "GPU-hours per tenant over the last 24 hours, by kind: allocated, used, or lost_<cause>",
            tenant_gpu_hours.clone(),
        );
        Self {
            registry: Arc::new(registry),
            requests,
            latency,
            jobs_submitted,
            transitions,
            jobs,
            tenant_gpus,
            tenant_gpu_hours,
            tenants_at: Arc::new(std::sync::Mutex::new(None)),
        }
    }

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

    /// Whether the per-tenant figures are due for a refresh (and marks them refreshed).
    pub fn tenants_due(&self) -> bool {
        let Ok(mut at) = self.tenants_at.lock() else {
            return false;
        };
        if at.is_some_and(|t| t.elapsed() < TENANT_REFRESH) {
            return false;
        }
        *at = Some(Instant::now());
        true
    }

    /// Replaces the per-tenant figures: `usage` per tenant (24 hours) and `shares` now.
    pub fn set_tenants(
        &self,
        usage: &[(String, crate::accounting::Totals)],
        shares: &[crate::routes::usage::ShareRow],
    ) {
        let mut ranked: Vec<&(String, crate::accounting::Totals)> = usage.iter().collect();
        ranked.sort_by(|a, b| b.1.allocated_gpu_hours.total_cmp(&a.1.allocated_gpu_hours));
        let own: std::collections::HashSet<&str> = ranked
            .iter()
            .take(MAX_TENANT_SERIES)
            .map(|(t, _)| t.as_str())
            .chain(
                shares
                    .iter()
                    .take(MAX_TENANT_SERIES)
                    .map(|s| s.tenant.as_str()),
            )
            .take(MAX_TENANT_SERIES)
            .collect();
        let name = |tenant: &str| {
            if own.contains(tenant) {
                tenant.to_owned()
            } else {
                "_other".to_owned()
            }
        };
        self.tenant_gpu_hours.clear();
        let add = |tenant: &str, kind: &'static str, value: f64| {
            self.tenant_gpu_hours
                .get_or_create(&TenantLabels {
                    tenant: name(tenant),
                    kind,
                })
                .inc_by(value);
        };
        for (tenant, totals) in usage {
            add(tenant, "allocated", totals.allocated_gpu_hours);
            add(tenant, "used", totals.used_gpu_hours);
            for cause in crate::routes::usage::CAUSES {
                let kind = LOST_KINDS
                    .iter()
                    .find(|(c, _)| *c == cause)
                    .map_or("lost_other", |(_, k)| *k);
                add(
                    tenant,
                    kind,
                    totals.lost_by_cause.get(cause).copied().unwrap_or(0.0),
                );
            }
        }
        self.tenant_gpus.clear();
        for share in shares {
            for (kind, value) in [
                ("guaranteed", f64::from(share.guaranteed_gpus)),
                ("held", share.held_gpus),
                ("borrowed", share.borrowed_gpus),
                ("lent", share.lent_gpus),
            ] {
                self.tenant_gpus
                    .get_or_create(&TenantLabels {
                        tenant: name(&share.tenant),
                        kind,
                    })
                    .inc_by(value);
            }
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %err, "encoding metrics failed");
        }
        out
    }
}

/// The `kind` label of each lost cause.
const LOST_KINDS: [(&str, &str); 9] = [
    ("startup", "lost_startup"),
    ("preemption", "lost_preemption"),
    ("failure", "lost_failure"),
    ("resize", "lost_resize"),
    ("migration", "lost_migration"),
    ("paused", "lost_paused"),
    ("cancelled", "lost_cancelled"),
    ("idle", "lost_idle"),
    ("other", "lost_other"),
];

/// Middleware: counts every request and times it, by route template.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let metrics = &state.metrics;
    metrics
        .latency
        .get_or_create(&RouteLabels {
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    metrics
        .requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}
