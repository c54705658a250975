//! Per-tenant GPU figures in Prometheus' text format, behind a token: `/metrics` carries no names,
//! so tenants' names and usage are served here, each caller seeing its own tenant's series (a cluster
//! administrator's token: every tenant's, the largest [`MAX_TENANT_SERIES`] by name and the rest summed
//! under `_other`). Prometheus scrapes it with `authorization: {credentials: <token>}`.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{Duration, Utc};
use drover_runtime::accounting::{Period, Totals};
use drover_service::auth::Principal;
use drover_service::usage::{By, CAUSES, ShareRow, report};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::HashSet;

/// Tenants with series of their own at most (the largest by GPU-hours allocated).
pub const MAX_TENANT_SERIES: usize = 50;

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    kind: &'static str,
}

/// The `kind` label of each lost cause.
fn lost_kind(cause: &str) -> &'static str {
    match cause {
        "startup" => "lost_startup",
        "preemption" => "lost_preemption",
        "failure" => "lost_failure",
        "resize" => "lost_resize",
        "migration" => "lost_migration",
        "paused" => "lost_paused",
        "cancelled" => "lost_cancelled",
        "idle" => "lost_idle",
        _ => "lost_other",
    }
}

/// The text format of the caller's tenants' GPU figures.
pub fn encode(usage: &[(String, Totals)], shares: &[ShareRow]) -> String {
    let mut ranked: Vec<&(String, Totals)> = usage.iter().collect();
    ranked.sort_by(|a, b| b.1.allocated_gpu_hours.total_cmp(&a.1.allocated_gpu_hours));
    let mut own: HashSet<&str> = ranked
        .iter()
        .take(MAX_TENANT_SERIES)
        .map(|(t, _)| t.as_str())
        .collect();
    for share in shares {
        if own.len() >= MAX_TENANT_SERIES {
            break;
        }
        own.insert(share.tenant.as_str());
    }
    let name = |tenant: &str| {
        if own.contains(tenant) {
            tenant.to_owned()
        } else {
            "_other".to_owned()
        }
    };
    let mut registry = Registry::with_prefix("drover");
    let hours = Family::<TenantLabels, FloatGauge>::default();
    registry.register(
        "tenant_gpu_hours_24h",
        "GPU-hours per tenant over the last 24 hours, by kind: allocated, used (training steps whose work was kept), or lost_<cause>",
        hours.clone(),
    );
    let gpus = Family::<TenantLabels, FloatGauge>::default();
    registry.register(
        "tenant_gpus",
        "GPUs per tenant at the last minute's sample, by kind: guaranteed, held, borrowed (held beyond the guarantee), lent (guaranteed but idle while others borrow)",
        gpus.clone(),
    );
    let add = |family: &Family<TenantLabels, FloatGauge>, tenant: &str, kind, value: f64| {
        family
            .get_or_create(&TenantLabels {
                tenant: name(tenant),
                kind,
            })
            .inc_by(value);
    };
    for (tenant, totals) in usage {
        add(&hours, tenant, "allocated", totals.allocated_gpu_hours);
        add(&hours, tenant, "used", totals.used_gpu_hours);
        for cause in CAUSES {
            let value = totals.lost_by_cause.get(cause).copied().unwrap_or(0.0);
            add(&hours, tenant, lost_kind(cause), value);
        }
    }
    for share in shares {
        add(
            &gpus,
            &share.tenant,
            "guaranteed",
            f64::from(share.guaranteed_gpus),
        );
        add(&gpus, &share.tenant, "held", share.held_gpus);
        add(&gpus, &share.tenant, "borrowed", share.borrowed_gpus);
        add(&gpus, &share.tenant, "lent", share.lent_gpus);
    }
    let mut out = String::new();
    if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %err, "encoding tenant metrics failed");
    }
    out
}

/// GPU-hours (last 24 hours) and GPUs now per tenant, for Prometheus.
#[utoipa::path(
    get, path = "/api/v1/usage/metrics", tag = "tenants",
    responses((status = 200, description = "OpenMetrics text format: `drover_tenant_gpu_hours_24h{tenant,kind}` and `drover_tenant_gpus{tenant,kind}` of the caller's tenant (every tenant's for a cluster administrator)",
               content_type = "application/openmetrics-text", body = String)),
    security(("bearer" = []))
)]
pub async fn metrics(State(state): State<AppState>, principal: Principal) -> ApiResult<Response> {
    let now = Utc::now();
    let usage = report(
        &state,
        principal.scope(),
        now - Duration::hours(24),
        now,
        By::Tenant,
        Period::Total,
    )
    .await?;
    let totals: Vec<(String, Totals)> = usage
        .rows
        .into_iter()
        .map(|r| (r.tenant, r.totals))
        .collect();
    let shares: Vec<ShareRow> = usage
        .fair_share
        .into_iter()
        .filter(|s| s.period_start.is_none())
        .collect();
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        encode(&totals, &shares),
    )
        .into_response())
}
