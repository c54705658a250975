//! The overview: GPUs in use over the last day, the queue, running jobs by tenant, goodput, and the
//! scheduler's policy with its last round.

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

/// Jobs counted per state on the overview; more shows as "500+".
const COUNT_LIMIT: u32 = 500;

#[derive(askama::Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    gpus_total: u32,
    gpus_allocated: u32,
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
    let count = async |states: Vec<JobState>| {
        let filter = JobFilter {
            states,
            limit: COUNT_LIMIT,
            ..JobFilter::default()
        };
        state.store.list_jobs(scope, &filter).await
    };
    let queued = count(vec![JobState::Queued]).await?;
    let active = count(vec![
        JobState::Starting,
        JobState::Running,
        JobState::Rescaling,
    ])
    .await?;
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
    let mut chart = Chart::new(
        "GPUs in use and in total over the last day",
        XAxis::HoursAgo,
        "GPUs",
        vec![
            series("total", |s| s.total),
            series("allocated", |s| s.allocated),
            series("running jobs", |s| s.running),
        ],
    );
    chart.x_range = Some((-86_400.0, 0.0));
    let chart = chart.svg();
    let nodes = state.store.list_nodes().await?;
    let gpus_total = nodes
        .iter()
        .filter(|n| n.health == "healthy")
        .map(|n| n.gpus.len() as u32)
        .sum();
    let gpus_allocated = state
        .store
        .live_tasks()
        .await?
        .iter()
        .map(|t| t.gpus.len() as u32)
        .sum();
    let round = state.store.last_round().await?;
    Ok(OverviewPage {
        layout: session.layout("overview"),
        gpus_total,
        gpus_allocated,
        queued: if queued.len() >= COUNT_LIMIT as usize {
            format!("{COUNT_LIMIT}+")
        } else {
            queued.len().to_string()
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
