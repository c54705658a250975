//! One job: its spec, state timeline, shape history, metric curves, fitted models, tasks, log tail
//! and checkpoints, with the actions the caller's role allows. Reads go through the API's handler
//! for the job (`GET /api/v1/jobs/{id}`: scoping, models) and the store's scoped queries.

use crate::charts::{ChartOptions, charts_svg};
use crate::page::{Layout, error_page, render};
use crate::session::Session;
use crate::time::{Time, duration, timestamp};
use axum::extract::{Path, State};
use axum::response::Response;
use drover_api::error::ApiError;
use drover_api::extract::QueryPairs;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_core::{JobId, JobState, ReasonCode};
use drover_service::models::{JobModels, RemainingBasis};
use drover_store::{JobEvent, LogFilter, LogLine, LogWindow};

/// Log lines the page shows (contract lines left out); the live stream appends the ones that follow.
pub(crate) const LOG_TAIL: u32 = 200;

#[derive(askama::Template)]
#[template(path = "job.html")]
struct JobPage {
    layout: Layout,
    job: Summary,
    spec_yaml: String,
    events: Vec<EventRow>,
    shapes: Vec<ShapeRow>,
    metric_names: Vec<String>,
    chart_options: ChartOptions,
    /// An option of the page's URL that could not be read.
    chart_error: Option<String>,
    /// The CSV of what the charts draw.
    csv: String,
    /// The page with the same charts over every step.
    whole_run: String,
    chart: String,
    model: Option<ModelView>,
    tasks: Vec<TaskRow>,
    logs: Vec<String>,
    checkpoints: Vec<CheckpointRow>,
    actions: Actions,
    /// Where the resize form starts.
    ranges: Option<Ranges>,
    /// The page's live stream, from what the page shows.
    live: String,
}

/// The header of the page (redrawn by the live stream).
#[derive(askama::Template)]
#[template(path = "job_summary.html")]
pub(crate) struct Summary {
    pub id: String,
    pub name: String,
    pub tenant: String,
    pub job_type: String,
    pub state: &'static str,
    pub reason: String,
    pub message: String,
    pub priority: i32,
    pub generation: u64,
    pub restarts: u32,
    pub created: Time,
    pub updated: Time,
    pub labels: String,
    /// A queued job's place in the queue.
    pub queue: Option<QueueFacts>,
}

/// A waiting job's place, reason and predicted start, as its page shows them.
pub(crate) struct QueueFacts {
    pub position: String,
    pub reason: String,
    pub start: String,
}

impl QueueFacts {
    fn of(queue: &drover_service::queue::QueuePosition) -> Self {
        let now = chrono::Utc::now();
        let when = |at: Option<chrono::DateTime<chrono::Utc>>| match at {
            None => "—".to_owned(),
            Some(at) if at <= now + chrono::Duration::seconds(30) => "now".to_owned(),
            Some(at) => format!(
                "in {}",
                duration((at - now).num_milliseconds() as f64 / 1000.0)
            ),
        };
        // A prediction resting on guessed lengths says so.
        let guess = match crate::cluster::guess_note(queue.guesses) {
            note if note.is_empty() => note,
            note => format!(" — {note}"),
        };
        let start = match (
            queue.reason.as_deref(),
            queue.position,
            queue.predicted_start,
        ) {
            (Some("never_fits"), _, _) => "never".to_owned(),
            (_, None, _) => "not forecast yet".to_owned(),
            (_, Some(_), None) => "beyond 30 days".to_owned(),
            (_, Some(_), Some(_)) if queue.overdue => {
                format!("now (overdue: the forecast's start has passed){guess}")
            }
            (_, Some(_), Some(at)) => format!(
                "{} (p10 – p90: {} – {}){guess}",
                when(Some(at)),
                when(queue.p10),
                queue.p90.map_or("later".to_owned(), |p| when(Some(p)))
            ),
        };
        QueueFacts {
            position: queue
                .position
                .map_or_else(|| "not ranked yet".to_owned(), |p| format!("#{p}")),
            reason: queue.explanation.clone(),
            start,
        }
    }
}

/// The state timeline (redrawn by the live stream).
#[derive(askama::Template)]
#[template(path = "job_events.html")]
pub(crate) struct EventsTable {
    pub events: Vec<EventRow>,
}

#[derive(Debug)]
pub(crate) struct EventRow {
    pub at: Time,
    pub from: String,
    pub to: &'static str,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug)]
struct ShapeRow {
    at: Time,
    reason: &'static str,
    message: String,
    /// From the decision to running at the new shape.
    latency: Option<String>,
}

#[derive(Debug)]
struct ModelView {
    steps_done: u64,
    speed: Vec<String>,
    formula: String,
    theta: String,
    fitted: bool,
    /// The loss curve in words; its formula and fitted figures in `curve`, kept out of sight.
    convergence: Option<String>,
    curve: Option<String>,
    remaining: Option<String>,
}

#[derive(Debug)]
struct TaskRow {
    generation: u64,
    name: String,
    node: String,
    gpus: String,
    state: String,
    exit: String,
    /// What a running task uses, as its executor last measured (empty otherwise).
    cpu: String,
    memory: String,
    /// Its GPUs' utilisation and memory, where the driver reports them.
    gpu_use: String,
    /// The same over the last minutes, as sparklines (where there are two points or more).
    cpu_spark: Option<String>,
    memory_spark: Option<String>,
    gpu_spark: Option<String>,
}

#[derive(Debug)]
struct CheckpointRow {
    step: u64,
    generation: u64,
    size: String,
    at: Time,
    url: String,
}

/// Which buttons the caller sees: only those its role may use on a job in this state.
#[derive(Debug, Default)]
struct Actions {
    cancel: bool,
    pause: bool,
    resume: bool,
    checkpoint: bool,
    resize: bool,
    clone: bool,
}

/// The job's current worker and PS ranges, which the resize form starts from.
struct Ranges {
    workers: (u64, u64),
    ps: (u64, u64),
}

impl Ranges {
    /// From a job's stored document (`spec.resources.workers` and `.ps`, each `{min, max}`).
    fn of(spec: &serde_json::Value) -> Option<Ranges> {
        let range = |role: &str| -> Option<(u64, u64)> {
            let r = spec.pointer(&format!("/spec/resources/{role}"))?;
            Some((r.get("min")?.as_u64()?, r.get("max")?.as_u64()?))
        };
        Some(Ranges {
            workers: range("workers")?,
            ps: range("ps").unwrap_or((0, 0)),
        })
    }

    fn text(&self) -> String {
        let span = |(min, max): (u64, u64)| {
            if min == max {
                min.to_string()
            } else {
                format!("{min}–{max}")
            }
        };
        format!("workers {}, PS {}", span(self.workers), span(self.ps))
    }
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    query: QueryPairs,
) -> Response {
    match job_page(&state, &session, id, &query).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

async fn job_page(
    state: &AppState,
    session: &Session,
    id: String,
    query: &QueryPairs,
) -> Result<JobPage, ApiError> {
    let scope = session.principal.scope();
    let view = api::job_view(drover_service::jobs::get(state, &session.principal, &id).await?);
    let job_id = JobId(view.id);
    let events = state
        .store
        .list_job_events(scope, job_id, None, 1000)
        .await?;
    let tasks = state.store.job_tasks(scope, job_id).await?;
    let checkpoints = drover_service::checkpoints::list(state, &session.principal, job_id).await?;
    let logs = state
        .store
        .list_logs(
            scope,
            job_id,
            &LogFilter {
                hide_contract: true,
                ..LogFilter::default()
            },
            LogWindow::LAST,
            LOG_TAIL,
        )
        .await?;
    let metric_names = state.store.metric_names(scope, job_id).await?;
    let defaults: Vec<String> = ["loss", "accuracy"]
        .iter()
        .filter(|name| metric_names.iter().any(|n| n == *name))
        .map(|name| (*name).to_owned())
        .collect();
    // Options the page cannot read are said above the charts, which draw the defaults.
    let (chart_options, chart_error) = match ChartOptions::parse(query, &defaults) {
        Ok(options) => (options, None),
        Err(err) => (
            ChartOptions::parse(&QueryPairs(Vec::new()), &defaults)?,
            Some(match &err.field {
                Some(field) => format!("{field}: {}", err.message),
                None => err.message.clone(),
            }),
        ),
    };
    let drawn = charts_svg(state, scope, job_id, view.created_at, &chart_options).await?;
    let csv = chart_options.csv_link(job_id, drawn.steps);
    let chart = drawn.svg;
    let step = state
        .store
        .last_steps(&[job_id])
        .await?
        .first()
        .map_or(0, |(_, step)| *step);
    let live = format!(
        "/jobs/{}/live?event={}&log={}&step={step}",
        view.id,
        events.last().map_or(0, |e| e.id),
        logs.last().map_or(0, |l| l.id),
    );
    let spec_yaml = view
        .spec
        .as_ref()
        .and_then(|spec| serde_yaml::to_string(spec).ok())
        .unwrap_or_default();
    let writer = session.can_write_jobs();
    let actions = Actions {
        cancel: writer && !view.state.is_final(),
        pause: writer && (view.state.holds_resources() || view.state == JobState::Queued),
        resume: writer && view.state == JobState::Paused,
        checkpoint: writer && view.state == JobState::Running,
        resize: writer && !view.state.is_final(),
        clone: writer,
    };
    Ok(JobPage {
        ranges: view.spec.as_ref().and_then(Ranges::of),
        layout: session.layout("jobs"),
        model: view.model.as_ref().map(model_view),
        job: summary(&view),
        spec_yaml,
        shapes: shape_history(&events),
        events: event_rows(&events),
        metric_names,
        csv,
        whole_run: ChartOptions {
            steps: drover_store::StepRange::ALL,
            span: None,
            ..chart_options.clone()
        }
        .page_link(job_id),
        chart_options,
        chart_error,
        chart,
        tasks: tasks
            .iter()
            .map(|t| {
                let usage = drover_api::routes::runs::with_usage(state, t.clone()).usage;
                (t, usage)
            })
            .map(|(t, usage)| {
                let history = usage.as_ref().map_or(&[][..], |u| &u.history[..]);
                TaskRow {
                    cpu: usage
                        .as_ref()
                        .and_then(|u| u.cpu_cores)
                        .map_or_else(String::new, |c| format!("{c:.2} cores")),
                    memory: usage
                        .as_ref()
                        .map_or_else(String::new, |u| format!("{:.2} GB", u.memory_gb)),
                    gpu_use: usage
                        .as_ref()
                        .and_then(|u| Some((u.gpu_utilization?, u.gpu_memory_gb?)))
                        .map_or_else(String::new, |(util, mem)| {
                            format!("{:.0}% · {mem:.1} GB", 100.0 * util)
                        }),
                    cpu_spark: task_spark(history, "CPU cores", 1.0, |p| p.cpu_cores),
                    memory_spark: task_spark(history, "memory, GB", 0.1, |p| Some(p.memory_gb)),
                    gpu_spark: task_spark(history, "GPU utilisation (0 to 1)", 1.0, |p| {
                        p.gpu_utilization
                    }),
                    generation: t.key.generation,
                    name: format!("{}-{}", t.key.role.as_str(), t.key.index),
                    node: t.node_name.clone(),
                    gpus: gpu_count(&t.gpus),
                    state: t.state.as_str().to_owned(),
                    exit: match (t.exit_code, t.exit_signal) {
                        (Some(code), _) => format!("exit {code}"),
                        (None, Some(signal)) => format!("signal {signal}"),
                        (None, None) => String::new(),
                    },
                }
            })
            .collect(),
        logs: logs.iter().map(log_text).collect(),
        checkpoints: checkpoints
            .iter()
            .rev()
            .map(|c| CheckpointRow {
                step: c.step,
                generation: c.generation,
                size: bytes(c.size_bytes),
                at: timestamp(c.created_at),
                url: format!("/api/v1/jobs/{}/checkpoints/{}/download", view.id, c.id),
            })
            .collect(),
        actions,
        live,
    })
}

/// A task's GPUs: how many, then which (`2 (GPUs 0, 1)`); `—` for none.
fn gpu_count(gpus: &[u16]) -> String {
    let which = gpus
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match gpus.len() {
        0 => "—".to_owned(),
        1 => format!("1 (GPU {which})"),
        n => format!("{n} (GPUs {which})"),
    }
}

pub(crate) fn summary(view: &drover_api::views::JobView) -> Summary {
    Summary {
        id: view.id.to_string(),
        name: view.name.clone(),
        tenant: view.tenant.clone(),
        job_type: serde_json::to_value(view.job_type)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        state: view.state.as_str(),
        reason: view.reason.as_str().replace('_', " "),
        message: view.message.clone(),
        priority: view.priority,
        generation: view.generation,
        restarts: view.restarts,
        created: timestamp(view.created_at),
        updated: timestamp(view.updated_at),
        labels: view
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        queue: view.queue.as_ref().map(QueueFacts::of),
    }
}

pub(crate) fn event_rows(events: &[JobEvent]) -> Vec<EventRow> {
    events
        .iter()
        .map(|e| EventRow {
            at: timestamp(e.created_at),
            from: e
                .from_state
                .map_or_else(String::new, |s| s.as_str().to_owned()),
            to: e.to_state.as_str(),
            reason: e.reason.as_str(),
            message: e.message.clone(),
        })
        .collect()
}

pub(crate) fn log_text(line: &LogLine) -> String {
    format!(
        "[g{} {}-{}] {}",
        line.generation,
        line.role.as_str(),
        line.index,
        line.line
    )
}

/// The events that changed where the job runs, each rescale with how long it took to run again.
/// A sparkline of one of a task's measurements over its recent history, scaled from 0 to the larger
/// of `floor` and the highest value; `None` with fewer than two known points.
fn task_spark(
    history: &[drover_api::run_views::TaskUsagePoint],
    what: &str,
    floor: f64,
    pick: fn(&drover_api::run_views::TaskUsagePoint) -> Option<f64>,
) -> Option<String> {
    let values: Vec<Option<f64>> = history.iter().map(pick).collect();
    if values.iter().flatten().count() < 2 {
        return None;
    }
    let top = values.iter().flatten().fold(floor, |top, v| top.max(*v));
    let minutes = match (history.first(), history.last()) {
        (Some(first), Some(last)) => crate::time::span_minutes(first.at, last.at),
        _ => 1,
    };
    Some(drover_plot::sparkline(
        &format!("{what} over the last {minutes} min (0 to {})", short(top)),
        &values,
        top,
    ))
}

/// A number in few digits (a sparkline's top).
fn short(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn shape_history(events: &[JobEvent]) -> Vec<ShapeRow> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            matches!(
                e.reason,
                ReasonCode::Allocated
                    | ReasonCode::Resized
                    | ReasonCode::Migrated
                    | ReasonCode::Preempted
                    | ReasonCode::Suspended
                    | ReasonCode::ExecutorLost
                    | ReasonCode::PausedByUser
            )
        })
        .map(|(i, e)| {
            let latency = matches!(e.to_state, JobState::Rescaling | JobState::Starting)
                .then(|| {
                    events[i + 1..]
                        .iter()
                        .find(|later| later.to_state != e.to_state)
                        .filter(|later| later.to_state == JobState::Running)
                        .map(|later| {
                            duration(
                                (later.created_at - e.created_at).num_milliseconds() as f64
                                    / 1000.0,
                            )
                        })
                })
                .flatten();
            ShapeRow {
                at: timestamp(e.created_at),
                reason: e.reason.as_str(),
                message: e.message.clone(),
                latency,
            }
        })
        .collect()
}

fn model_view(model: &JobModels) -> ModelView {
    ModelView {
        steps_done: model.steps_done,
        speed: model
            .speed
            .shapes
            .iter()
            .map(|s| {
                format!(
                    "{} PS × {} workers: {:.1} ms/step measured ({} reports), {:.1} ms predicted",
                    s.ps, s.workers, s.mean_step_ms, s.samples, s.predicted_step_ms
                )
            })
            .collect(),
        formula: model.speed.formula.clone(),
        theta: model
            .speed
            .theta
            .iter()
            .map(|t| format!("{t:.4}"))
            .collect::<Vec<_>>()
            .join(", "),
        fitted: model.speed.fitted,
        convergence: model.convergence.as_ref().map(|c| {
            // `converged_step` is absent for a flat curve.
            let converged = match c.converged_step {
                Some(s) if s >= 1.0 => format!("it levels off near step {s:.0}"),
                Some(_) => "it levelled off within the first steps".to_owned(),
                None => "it is flat".to_owned(),
            };
            format!("{converged} (a curve fitted to {} loss samples)", c.samples)
        }),
        curve: model.convergence.as_ref().map(|c| {
            let b = c.beta;
            format!(
                "loss ≈ 1/({:.4}·k + {:.4}) + {:.4} at step k",
                b[0], b[1], b[2]
            )
        }),
        remaining: model.remaining.as_ref().map(|r| {
            let basis = match r.basis {
                RemainingBasis::StepBudget => "to max_steps",
                RemainingBasis::Convergence => "to convergence (fitted curve)",
            };
            let time = r
                .seconds
                .map(|s| format!("about {}", duration(s)))
                .unwrap_or_else(|| "time unknown yet".to_owned());
            format!(
                "{} steps {basis}: {time} at {} PS × {} workers",
                r.steps, r.ps, r.workers
            )
        }),
    }
}

fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The models read in words: the fitted figures (θ, β, the curve's formula) only in what the
    /// page keeps folded away, and no "near step 0".
    #[test]
    fn the_models_read_in_words_with_their_figures_folded_away() {
        use drover_service::models::{ConvergenceFit, SpeedFit};
        let model = |converged_step| JobModels {
            steps_done: 1200,
            speed: SpeedFit {
                formula: "t = θ0/w + θ1".into(),
                theta: [0.0006, 0.01, 0.0, 0.0, 0.0],
                fitted: true,
                shapes: Vec::new(),
            },
            convergence: Some(ConvergenceFit {
                beta: [0.0123, 0.5, 0.25],
                samples: 40,
                converged_step,
            }),
            remaining: None,
        };
        let view = model_view(&model(Some(3456.4)));
        let plain = view.convergence.unwrap();
        assert_eq!(
            plain,
            "it levels off near step 3456 (a curve fitted to 40 loss samples)"
        );
        assert!(view.curve.unwrap().contains("0.0123"));
        let early = model_view(&model(Some(0.4))).convergence.unwrap();
        assert!(
            !early.contains("step 0") && early.contains("within the first steps"),
            "{early}"
        );
        let flat = model_view(&model(None)).convergence.unwrap();
        assert!(flat.starts_with("it is flat"), "{flat}");
    }

    /// A task on GPU 0 reads as one GPU, not as zero.
    #[test]
    fn a_tasks_gpus_are_counted_then_named() {
        assert_eq!(gpu_count(&[0]), "1 (GPU 0)");
        assert_eq!(gpu_count(&[2, 3]), "2 (GPUs 2, 3)");
        assert_eq!(gpu_count(&[]), "—");
    }

    /// A task's recent use is drawn once it has two measurements, scaled to its highest (or the
    /// floor), over the minutes it spans; a measurement never made (GPU use of demo GPUs) is not.
    #[test]
    fn a_tasks_recent_use_is_a_sparkline_of_what_was_measured() {
        use drover_api::run_views::TaskUsagePoint;
        let at = |s: i64| chrono::DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let point = |s, cpu, memory| TaskUsagePoint {
            at: at(s),
            cpu_cores: cpu,
            memory_gb: memory,
            gpu_utilization: None,
            gpu_memory_gb: None,
        };
        let history = [
            point(0, None, 0.5),
            point(10, Some(1.5), 1.0),
            point(150, Some(3.0), 2.5),
        ];
        let cpu = task_spark(&history, "CPU cores", 1.0, |p| p.cpu_cores).unwrap();
        assert!(
            cpu.contains("CPU cores over the last 3 min (0 to 3.00)"),
            "{cpu}"
        );
        assert!(cpu.contains("<polyline"), "{cpu}");
        let memory = task_spark(&history, "memory, GB", 0.1, |p| Some(p.memory_gb)).unwrap();
        assert!(memory.contains("(0 to 2.50)"), "{memory}");
        assert_eq!(
            task_spark(&history, "GPU", 1.0, |p| p.gpu_utilization),
            None
        );
        assert_eq!(
            task_spark(&history[..1], "CPU", 1.0, |p| Some(p.memory_gb)),
            None
        );
    }
}
