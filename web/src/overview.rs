//! The overview: GPUs and CPUs in use, GPUs over the last day (or since the first sample, on a new
//! cluster), the queue, running jobs by tenant, goodput, and the scheduler's policy with its last
//! round.

use crate::page::{Layout, error_page, render};
use crate::session::Session;
use crate::time::{Time, timestamp};
use axum::extract::State;
use axum::response::Response;
use chrono::Utc;
use drover_api::error::ApiError;
use drover_api::state::AppState;
use drover_core::JobState;
use drover_plot::{Chart, Series, XAxis};
use drover_store::JobFilter;
use std::collections::BTreeMap;

/// Jobs counted per state on the overview; more shows as "10,000+".
const COUNT_LIMIT: u32 = 10_000;
/// Running jobs listed for the by-tenant table at most.
const RUNNING_LISTED: u32 = 2_000;

#[derive(askama::Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    gpus_total: u32,
    gpus_allocated: u32,
    cpus_total: u32,
    cpus_allocated: u32,
    /// What the chart spans, in words ("the last day", "the last hour").
    chart_span: String,
    queued: String,
    running: Vec<(String, usize)>,
    goodput: Option<String>,
    chart: String,
    policy: Option<String>,
    round_ms: Option<String>,
    round_at: Option<Time>,
}

pub async fn page(State(state): State<AppState>, session: Session) -> Response {
    match overview(&state, &session).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

async fn overview(state: &AppState, session: &Session) -> Result<OverviewPage, ApiError> {
    let scope = session.principal.scope();
    let queued_filter = JobFilter {
        states: vec![JobState::Queued],
        ..JobFilter::default()
    };
    let queued = state
        .store
        .count_jobs(scope, &queued_filter, COUNT_LIMIT)
        .await?;
    let active_filter = JobFilter {
        states: vec![JobState::Starting, JobState::Running, JobState::Rescaling],
        limit: RUNNING_LISTED,
        ..JobFilter::default()
    };
    let active = state.store.list_jobs(scope, &active_filter).await?;
    let mut running: BTreeMap<String, usize> = BTreeMap::new();
    for job in &active {
        *running.entry(job.tenant_name.clone()).or_default() += 1;
    }
    let now = Utc::now();
    let samples = state
        .store
        .gpu_usage_since(now - chrono::Duration::days(1))
        .await?;
    let (allocated, useful) = samples.iter().fold((0u64, 0u64), |(a, r), s| {
        (a + u64::from(s.allocated), r + u64::from(s.running))
    });
    let goodput =
        (allocated > 0).then(|| format!("{:.0}%", 100.0 * useful as f64 / allocated as f64));
    let seconds_ago = |at: chrono::DateTime<Utc>| (at - now).num_milliseconds() as f64 / 1000.0;
    // Each sample holds until the next; the last one until now.
    let series = |name: &str, pick: fn(&drover_store::GpuUsage) -> u32| {
        let mut points: Vec<(f64, f64)> = Vec::with_capacity(2 * samples.len() + 1);
        for s in &samples {
            let value = f64::from(pick(s));
            if let Some(&(_, previous)) = points.last() {
                points.push((seconds_ago(s.at), previous));
            }
            points.push((seconds_ago(s.at), value));
        }
        if let Some(&(_, last)) = points.last() {
            points.push((0.0, last));
        }
        Series {
            name: name.to_owned(),
            points,
        }
    };
    // A day, or on a newer cluster the time since its first sample (at least an hour): a day's
    // axis made a new cluster's few minutes a sliver.
    let span_s = samples.first().map_or(3_600.0, |first| {
        (-seconds_ago(first.at)).clamp(3_600.0, 86_400.0)
    });
    let hours = (span_s / 3_600.0).ceil();
    let chart_span = match hours as u32 {
        24.. => "the last day".to_owned(),
        1 => "the last hour".to_owned(),
        n => format!("the last {n} hours"),
    };
    let label = format!("GPUs in use and in total over {chart_span}");
    let mut chart = Chart::new(
        &label,
        XAxis::HoursAgo,
        "GPUs",
        vec![
            series("total", |s| s.total),
            series("allocated", |s| s.allocated),
            series("running jobs", |s| s.running),
        ],
    );
    chart.x_range = Some((-hours.min(24.0) * 3_600.0, 0.0));
    let chart = chart.svg();
    let nodes = state.store.list_nodes().await?;
    let healthy = || nodes.iter().filter(|n| n.health == "healthy");
    let gpus_total = healthy().map(|n| n.gpus.len() as u32).sum();
    let cpus_total = healthy().map(|n| n.cpus).sum();
    let live = state.store.live_tasks().await?;
    let gpus_allocated = live.iter().map(|t| t.gpus.len() as u32).sum();
    let cpus_allocated = live.iter().map(|t| t.cpus).sum();
    let round = state.store.last_round().await?;
    Ok(OverviewPage {
        layout: session.layout("overview"),
        gpus_total,
        gpus_allocated,
        cpus_total,
        cpus_allocated,
        chart_span,
        queued: if queued >= u64::from(COUNT_LIMIT) {
            "10,000+".to_owned()
        } else {
            queued.to_string()
        },
        running: running.into_iter().collect(),
        goodput,
        chart,
        policy: round.as_ref().map(|r| r.policy.clone()),
        round_ms: round
            .as_ref()
            .map(|r| format!("{:.1} ms", r.duration_us as f64 / 1000.0)),
        round_at: round.as_ref().map(|r| timestamp(r.finished_at)),
    })
}
