//! Accounting: GPU-hours allocated, used by training that was kept, and lost by cause, per tenant,
//! user or job and per day or week; and fair share made visible (each tenant's guaranteed, held,
//! borrowed and lent GPUs). JSON, or CSV with `format=csv`.

use crate::accounting::{self, Period, Totals};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::QueryPairs;
use crate::state::AppState;
use crate::store::{GpuUsage, LedgerRow, Scope};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Allocations read for one answer at most; beyond it the answer says it is truncated.
const MAX_ALLOCATIONS: u32 = 200_000;
/// The longest window one request may ask for.
const MAX_WINDOW_DAYS: i64 = 400;
/// Lost causes, in the CSV's column order.
pub const CAUSES: [&str; 9] = [
    "startup",
    "preemption",
    "failure",
    "resize",
    "migration",
    "paused",
    "cancelled",
    "idle",
    "other",
];

/// What usage is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Tenant,
    User,
    Job,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Tenant => "tenant",
            By::User => "user",
            By::Job => "job",
        }
    }
}

/// One group in one period.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageRow {
    /// Start of the period (UTC midnight; Monday for weeks; the window's start for `total`).
    pub period_start: DateTime<Utc>,
    pub tenant: String,
    /// With `by=user` or `by=job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// With `by=job`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<uuid::Uuid>,
    #[serde(flatten)]
    pub totals: Totals,
}

/// A tenant's share of the GPUs: now, and on average over each period of the window.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ShareRow {
    pub tenant: String,
    /// `null` for the current figures.
    pub period_start: Option<DateTime<Utc>>,
    pub guaranteed_gpus: u32,
    /// GPUs its tasks held (averaged over the period's samples).
    pub held_gpus: f64,
    /// Held beyond its guarantee.
    pub borrowed_gpus: f64,
    /// Its guarantee it was not using while other tenants borrowed.
    pub lent_gpus: f64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Usage {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// `tenant`, `user` or `job`.
    pub by: String,
    /// `day`, `week` or `total`.
    pub period: String,
    pub rows: Vec<UsageRow>,
    /// Over every row.
    pub total: Totals,
    /// Each tenant's guaranteed, held, borrowed and lent GPUs, now and per period (from the GPU use
    /// the leader samples every minute, kept for eight days).
    pub fair_share: Vec<ShareRow>,
    /// More allocations overlap the window than one answer reads: narrow it.
    pub truncated: bool,
}

fn parse_instant(field: &str, raw: &str) -> ApiResult<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(at.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .ok_or_else(|| {
            ApiError::bad_request(
                field,
                format!("`{raw}` is neither a date (2026-11-01) nor an RFC 3339 time"),
            )
        })
}

/// GPU-hours allocated, used and lost by cause.
#[utoipa::path(
    get, path = "/api/v1/usage", tag = "tenants",
    params(
        ("from" = Option<String>, Query, description = "Window start: a date (`2026-11-01`, UTC midnight) or an RFC 3339 time; default seven days ago"),
        ("to" = Option<String>, Query, description = "Window end (exclusive); default now"),
        ("by" = Option<String>, Query, description = "`tenant` (default), `user` or `job`"),
        ("period" = Option<String>, Query, description = "`day`, `week` or `total` (default)"),
        ("tenant" = Option<String>, Query, description = "Cluster administrators: only this tenant; others see their own tenant only"),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv`"),
    ),
    responses(
        (status = 200, body = Usage, description = "JSON, or `text/csv` with `format=csv`"),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn usage(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Response> {
    query.only(&["from", "to", "by", "period", "tenant", "format"])?;
    let now = Utc::now();
    let to = query
        .get("to")
        .map(|raw| parse_instant("to", raw))
        .transpose()?
        .unwrap_or(now);
    let from = query
        .get("from")
        .map(|raw| parse_instant("from", raw))
        .transpose()?
        .unwrap_or(to - Duration::days(7));
    if from >= to {
        return Err(ApiError::bad_request("from", "must be before `to`"));
    }
    if to - from > Duration::days(MAX_WINDOW_DAYS) {
        return Err(ApiError::bad_request(
            "from",
            format!("the window may span at most {MAX_WINDOW_DAYS} days"),
        ));
    }
    let by = match query.get("by").unwrap_or("tenant") {
        "tenant" => By::Tenant,
        "user" => By::User,
        "job" => By::Job,
        other => {
            return Err(ApiError::bad_request(
                "by",
                format!("`{other}`: expected tenant, user or job"),
            ));
        }
    };
    let period = match query.get("period").unwrap_or("total") {
        "day" => Period::Day,
        "week" => Period::Week,
        "total" => Period::Total,
        other => {
            return Err(ApiError::bad_request(
                "period",
                format!("`{other}`: expected day, week or total"),
            ));
        }
    };
    let csv = match query.get("format").unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => {
            return Err(ApiError::bad_request(
                "format",
                format!("`{other}`: expected json or csv"),
            ));
        }
    };
    let scope = super::tenant_scope(&state, &principal, query.get("tenant"), "usage").await?;
    let usage = report(&state, scope, from, to, by, period).await?;
    if csv {
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"drover-usage.csv\"",
                ),
            ],
            to_csv(&usage.rows),
        )
            .into_response());
    }
    Ok(Json(usage).into_response())
}

/// The usage report of `scope` over [`from`, `to`).
pub async fn report(
    state: &AppState,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: By,
    period: Period,
) -> ApiResult<Usage> {
    let now = Utc::now();
    let rows = state
        .store
        .allocations_between(scope, from, to, MAX_ALLOCATIONS)
        .await?;
    let truncated = rows.len() >= MAX_ALLOCATIONS as usize;
    let (rows, total) = tally(&rows, by, period, from, to, now);
    let fair_share = fair_share(state, scope, period, from, to).await?;
    Ok(Usage {
        from,
        to,
        by: by.as_str().to_owned(),
        period: period.as_str().to_owned(),
        rows,
        total,
        fair_share,
        truncated,
    })
}

type Key = (String, Option<String>, Option<(uuid::Uuid, String)>);

/// Splits every allocation into used and lost stretches and adds them up per group and period.
pub fn tally(
    rows: &[LedgerRow],
    by: By,
    period: Period,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
) -> (Vec<UsageRow>, Totals) {
    let mut buckets: BTreeMap<(Key, DateTime<Utc>), Totals> = BTreeMap::new();
    let mut total_buckets: BTreeMap<((), DateTime<Utc>), Totals> = BTreeMap::new();
    for row in rows {
        let key: Key = match by {
            By::Tenant => (row.tenant.clone(), None, None),
            By::User => (row.tenant.clone(), Some(row.user.clone()), None),
            By::Job => (
                row.tenant.clone(),
                Some(row.user.clone()),
                Some((row.allocation.job_id.0, row.job.clone())),
            ),
        };
        for segment in accounting::segments(&row.allocation, now) {
            accounting::accumulate(&mut buckets, &key, &segment, period, from, to);
            accounting::accumulate(&mut total_buckets, &(), &segment, Period::Total, from, to);
        }
    }
    let rows = buckets
        .into_iter()
        .map(|((key, period_start), totals)| UsageRow {
            period_start,
            tenant: key.0,
            user: key.1,
            job_id: key.2.as_ref().map(|(id, _)| *id),
            job: key.2.map(|(_, name)| name),
            totals,
        })
        .collect();
    (rows, total_buckets.into_values().next().unwrap_or_default())
}

fn to_csv(rows: &[UsageRow]) -> String {
    let mut out = String::from(
        "period_start,tenant,user,job_id,job,allocated_gpu_hours,used_gpu_hours,lost_gpu_hours",
    );
    for cause in CAUSES {
        out.push_str(",lost_");
        out.push_str(cause);
    }
    out.push('\n');
    let field = |text: &str| {
        if text.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_owned()
        }
    };
    for row in rows {
        let t = &row.totals;
        out.push_str(&format!(
            "{},{},{},{},{},{:.6},{:.6},{:.6}",
            row.period_start.to_rfc3339(),
            field(&row.tenant),
            field(row.user.as_deref().unwrap_or("")),
            row.job_id.map(|id| id.to_string()).unwrap_or_default(),
            field(row.job.as_deref().unwrap_or("")),
            t.allocated_gpu_hours,
            t.used_gpu_hours,
            t.lost_gpu_hours,
        ));
        for cause in CAUSES {
            out.push_str(&format!(
                ",{:.6}",
                t.lost_by_cause.get(cause).copied().unwrap_or(0.0)
            ));
        }
        out.push('\n');
    }
    out
}

/// Borrowed and lent GPUs in one sample: each tenant's idle guarantee counts as lent in proportion
/// to what the others borrowed beyond theirs.
fn shares(
    sample: &GpuUsage,
    guaranteed: &HashMap<String, u32>,
) -> HashMap<String, (f64, f64, f64)> {
    let held = |name: &str| f64::from(sample.by_tenant.get(name).copied().unwrap_or(0));
    let borrowed: f64 = guaranteed
        .iter()
        .map(|(name, g)| (held(name) - f64::from(*g)).max(0.0))
        .sum::<f64>()
        + sample
            .by_tenant
            .iter()
            .filter(|(name, _)| !guaranteed.contains_key(*name))
            .map(|(_, h)| f64::from(*h))
            .sum::<f64>();
    let idle: f64 = guaranteed
        .iter()
        .map(|(name, g)| (f64::from(*g) - held(name)).max(0.0))
        .sum();
    let lent_share = if idle > 0.0 {
        (borrowed / idle).min(1.0)
    } else {
        0.0
    };
    guaranteed
        .iter()
        .map(|(name, g)| {
            let h = held(name);
            let g = f64::from(*g);
            (
                name.clone(),
                (h, (h - g).max(0.0), (g - h).max(0.0) * lent_share),
            )
        })
        .collect()
}

async fn fair_share(
    state: &AppState,
    scope: Scope,
    period: Period,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> ApiResult<Vec<ShareRow>> {
    let tenants = state.store.list_tenants().await?;
    let guaranteed: HashMap<String, u32> = tenants
        .iter()
        .map(|t| (t.name.clone(), t.quota.guaranteed_gpus))
        .collect();
    let visible = |name: &str| match scope {
        Scope::Cluster => true,
        Scope::Tenant(id) => tenants.iter().any(|t| t.id == id && t.name == name),
    };
    let samples: Vec<GpuUsage> = state
        .store
        .gpu_usage_since(from)
        .await?
        .into_iter()
        .filter(|s| s.at < to)
        .collect();
    let mut out = Vec::new();
    if let Some(last) = samples.last() {
        for (name, (held, borrowed, lent)) in shares(last, &guaranteed) {
            if visible(&name) {
                out.push(ShareRow {
                    guaranteed_gpus: guaranteed[&name],
                    tenant: name,
                    period_start: None,
                    held_gpus: held,
                    borrowed_gpus: borrowed,
                    lent_gpus: lent,
                });
            }
        }
    }
    // Per tenant and period: the sums of held, borrowed and lent GPUs, and the samples summed.
    type Sums = (f64, f64, f64, u32);
    let mut periods: BTreeMap<(String, DateTime<Utc>), Sums> = BTreeMap::new();
    for sample in &samples {
        let start = accounting::period_start(period, sample.at, from);
        for (name, (held, borrowed, lent)) in shares(sample, &guaranteed) {
            if visible(&name) {
                let entry = periods.entry((name, start)).or_default();
                entry.0 += held;
                entry.1 += borrowed;
                entry.2 += lent;
                entry.3 += 1;
            }
        }
    }
    out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    out.extend(periods.into_iter().map(|((tenant, start), (h, b, l, n))| {
        let n = f64::from(n.max(1));
        ShareRow {
            guaranteed_gpus: guaranteed.get(&tenant).copied().unwrap_or(0),
            tenant,
            period_start: Some(start),
            held_gpus: h / n,
            borrowed_gpus: b / n,
            lent_gpus: l / n,
        }
    }));
    Ok(out)
}
