//! Accounting as users read it: GPU-hours allocated, used by training that was kept, and lost by
//! cause, per tenant, user or job and per day or week (from the runtime's allocation ledger, split by
//! `drover_runtime::accounting`); and fair share made visible — each tenant's guaranteed, held,
//! borrowed and lent GPUs.

use crate::Service;
use crate::error::ServiceResult;
use chrono::{DateTime, Utc};
use drover_runtime::accounting::{self, Period, Totals};
use drover_store::{GpuUsage, LedgerRow, Scope};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Allocations read for one answer at most; beyond it the answer says it is truncated.
const MAX_ALLOCATIONS: u32 = 200_000;
/// The longest window one request may ask for.
pub const MAX_WINDOW_DAYS: i64 = 400;
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

/// The usage report of `scope` over [`from`, `to`).
pub async fn report(
    service: &Service,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    by: By,
    period: Period,
) -> ServiceResult<Usage> {
    let now = Utc::now();
    let rows = service
        .store
        .allocations_between(scope, from, to, MAX_ALLOCATIONS)
        .await?;
    let truncated = rows.len() >= MAX_ALLOCATIONS as usize;
    let (rows, total) = tally(&rows, by, period, from, to, now);
    let fair_share = fair_share(service, scope, period, from, to).await?;
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
            let held = (&segment, &row.allocation.gpu_models);
            accounting::accumulate(&mut buckets, &key, held, period, from, to);
            accounting::accumulate(&mut total_buckets, &(), held, Period::Total, from, to);
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
    service: &Service,
    scope: Scope,
    period: Period,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> ServiceResult<Vec<ShareRow>> {
    let tenants = service.store.list_tenants().await?;
    let guaranteed: HashMap<String, u32> = tenants
        .iter()
        .map(|t| (t.name.clone(), t.quota.guaranteed_gpus))
        .collect();
    let visible = |name: &str| match scope {
        Scope::Cluster => true,
        Scope::Tenant(id) => tenants.iter().any(|t| t.id == id && t.name == name),
    };
    let samples: Vec<GpuUsage> = service
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
