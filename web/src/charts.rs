//! A job's metric charts, on its page and at `GET /jobs/{id}/chart` (which the page's controls and
//! live updates redraw without a reload): one chart per metric on its own axis, by step or by time
//! since the job was submitted, over every step or a range of them or a span of time (a zoom,
//! gathered afresh at full resolution), on a log scale or smoothed. The options read the same from the page's URL (the form
//! works without a script) and from the chart's; the CSV of what is drawn is one link away
//! (`GET /api/v1/jobs/{id}/metrics?format=csv`).

use crate::page::error_page;
use crate::session::Session;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use drover_api::error::ApiError;
use drover_api::extract::QueryPairs;
use drover_api::routes::jobs as api;
use drover_api::state::AppState;
use drover_core::JobId;
use drover_plot::{Chart, Series, XAxis, smooth};
use drover_store::{MetricBucket, Scope, StepRange};

/// Metrics drawn at once, at most.
pub(crate) const MAX_SERIES: usize = 8;
/// The longest metric name read.
const MAX_NAME: usize = 100;
/// What the x axis of a chart by time says.
const SINCE: &str = "time since submission";

/// How a job's charts are drawn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChartOptions {
    pub metrics: Vec<String>,
    pub log: bool,
    /// 0 (raw) to 0.99.
    pub smooth: f64,
    /// By time since submission rather than by step.
    pub time: bool,
    pub steps: StepRange,
    /// By time only: the span drawn, seconds since submission (`from_s`, `to_s`; either end open).
    pub span: Option<(f64, f64)>,
}

impl ChartOptions {
    /// The options a query asks for: `metric` (repeated; or `metrics`, comma-separated), `log`,
    /// `smooth` (0 to 0.99), `x` (`step` or `time`), `from` and `to` (steps, both included; empty
    /// means open), and by time `from_s` and `to_s` (seconds since submission) instead. With neither metrics nor `x` given, `defaults` are drawn. A value that cannot
    /// be read is an error naming its parameter.
    pub fn parse(query: &QueryPairs, defaults: &[String]) -> Result<Self, ApiError> {
        let named = query.get("metric").is_some() || query.get("metrics").is_some();
        let mut metrics: Vec<String> = Vec::new();
        let listed = query.all("metrics").flat_map(|m| m.split(','));
        for name in query.all("metric").chain(listed).map(str::trim) {
            if name.is_empty() || name.len() > MAX_NAME || metrics.iter().any(|m| m == name) {
                continue;
            }
            metrics.push(name.to_owned());
        }
        metrics.truncate(MAX_SERIES);
        if !named && query.get("x").is_none() {
            metrics = defaults.to_vec();
        }
        let log = match query.get("log") {
            None | Some("" | "false") => false,
            Some("true" | "on") => true,
            Some(other) => {
                return Err(ApiError::bad_request(
                    "log",
                    format!("`{other}`: expected true or false"),
                ));
            }
        };
        let smooth = match query.get("smooth").filter(|s| !s.is_empty()) {
            None => 0.0,
            Some(raw) => match raw.parse::<f64>() {
                Ok(w) if (0.0..=0.99).contains(&w) => w,
                _ => {
                    return Err(ApiError::bad_request(
                        "smooth",
                        format!("`{raw}`: expected a number from 0 to 0.99"),
                    ));
                }
            },
        };
        let time = match query.get("x") {
            None | Some("" | "step") => false,
            Some("time") => true,
            Some(other) => {
                return Err(ApiError::bad_request(
                    "x",
                    format!("`{other}`: expected step or time"),
                ));
            }
        };
        let step = |field: &str| -> Result<Option<u64>, ApiError> {
            match query.get(field).map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(raw) => match raw.parse::<u64>() {
                    Ok(n) if n <= i64::MAX as u64 => Ok(Some(n)),
                    _ => Err(ApiError::bad_request(
                        field,
                        format!("`{raw}`: expected a step, a whole number from 0"),
                    )),
                },
            }
        };
        let steps = StepRange {
            from: step("from")?,
            to: step("to")?,
        };
        if let (Some(from), Some(to)) = (steps.from, steps.to)
            && from > to
        {
            return Err(ApiError::bad_request(
                "to",
                format!("step {to} is before `from` (step {from})"),
            ));
        }
        let seconds = |field: &str| -> Result<Option<f64>, ApiError> {
            match query.get(field).map(str::trim).filter(|s| !s.is_empty()) {
                None => Ok(None),
                Some(raw) => match raw.parse::<f64>() {
                    Ok(s) if s.is_finite() && s >= 0.0 => Ok(Some(s)),
                    _ => Err(ApiError::bad_request(
                        field,
                        format!("`{raw}`: expected seconds since submission, a number from 0"),
                    )),
                },
            }
        };
        let span = match (seconds("from_s")?, seconds("to_s")?) {
            (None, None) => None,
            (from, to) => {
                let field = if from.is_some() { "from_s" } else { "to_s" };
                if !time {
                    return Err(ApiError::bad_request(
                        field,
                        "a span of time zooms a chart by time: give it with x=time",
                    ));
                }
                if steps != StepRange::ALL {
                    return Err(ApiError::bad_request(
                        field,
                        "zoom by steps (from, to) or by time (from_s, to_s), not both",
                    ));
                }
                let (from, to) = (from.unwrap_or(0.0), to.unwrap_or(f64::INFINITY));
                if from > to {
                    return Err(ApiError::bad_request(
                        "to_s",
                        format!("{to} s is before `from_s` ({from} s)"),
                    ));
                }
                Some((from, to))
            }
        };
        Ok(ChartOptions {
            metrics,
            log,
            smooth,
            time,
            steps,
            span,
        })
    }

    /// The span of time's start and end as the form shows them (empty where open).
    pub fn span_text(&self) -> (String, String) {
        match self.span {
            None => (String::new(), String::new()),
            Some((from, to)) => (
                from.to_string(),
                if to.is_finite() {
                    to.to_string()
                } else {
                    String::new()
                },
            ),
        }
    }

    /// The job's page drawing these charts.
    pub fn page_link(&self, job: JobId) -> String {
        let mut pairs: Vec<(&str, String)> = self
            .metrics
            .iter()
            .map(|name| ("metric", name.clone()))
            .collect();
        pairs.push(("x", if self.time { "time" } else { "step" }.to_owned()));
        if self.log {
            pairs.push(("log", "true".to_owned()));
        }
        if self.smooth > 0.0 {
            pairs.push(("smooth", self.smooth.to_string()));
        }
        if let Some(from) = self.steps.from {
            pairs.push(("from", from.to_string()));
        }
        if let Some(to) = self.steps.to {
            pairs.push(("to", to.to_string()));
        }
        if let Some((from, to)) = self.span {
            pairs.push(("from_s", from.to_string()));
            if to.is_finite() {
                pairs.push(("to_s", to.to_string()));
            }
        }
        format!(
            "/jobs/{}?{}#metrics-title",
            job.0,
            serde_urlencoded::to_string(&pairs).unwrap_or_default()
        )
    }

    /// The CSV of the metrics drawn, over `steps` (the range drawn: a span of time drawn is the
    /// steps recorded in it).
    pub fn csv_link(&self, job: JobId, steps: StepRange) -> String {
        let mut pairs: Vec<(&str, String)> = vec![("format", "csv".to_owned())];
        pairs.extend(self.metrics.iter().map(|name| ("name", name.clone())));
        if let Some(from) = steps.from {
            pairs.push(("from_step", from.to_string()));
        }
        if let Some(to) = steps.to {
            pairs.push(("to_step", to.to_string()));
        }
        format!(
            "/api/v1/jobs/{}/metrics?{}",
            job.0,
            serde_urlencoded::to_string(&pairs).unwrap_or_default()
        )
    }
}

/// `GET /jobs/{id}/chart`: the charts alone, as SVG, for the page's controls and live updates.
pub async fn chart(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    query: QueryPairs,
) -> Response {
    let Ok(job_id) = api::parse_job_id(&id) else {
        return error_page(ApiError::not_found(format!("no job `{id}`")));
    };
    let drawn = async {
        let options = ChartOptions::parse(&query, &[])?;
        let scope = session.principal.scope();
        let job = state
            .store
            .get_job(scope, job_id)
            .await
            .map_err(|err| ApiError::from_store(err, || format!("no job `{id}`")))?;
        let drawn = charts_svg(&state, scope, job_id, job.created_at, &options).await?;
        Ok::<_, ApiError>((options.csv_link(job_id, drawn.steps), drawn.svg))
    };
    match drawn.await {
        // The CSV of what is drawn, for the page's download link.
        Ok((csv, svg)) => (
            crate::page::PAGE_HEADERS,
            [
                (
                    header::CONTENT_TYPE,
                    "image/svg+xml; charset=utf-8".to_owned(),
                ),
                (
                    header::LINK,
                    format!("<{csv}>; rel=\"alternate\"; type=\"text/csv\""),
                ),
            ],
            svg,
        )
            .into_response(),
        // What the page's script shows beside the charts.
        Err(err) => (
            err.status,
            crate::page::PAGE_HEADERS,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            match &err.field {
                Some(field) => format!("{field}: {}", err.message),
                None => err.message.clone(),
            },
        )
            .into_response(),
    }
}

/// Charts as drawn, and the steps they draw.
pub(crate) struct Drawn {
    pub svg: String,
    /// `options.steps`; for a span of time, the steps recorded in it (of every metric drawn).
    pub steps: StepRange,
}

/// The ranges of `whole` (a whole run's, in step order) recorded during `span` (seconds since
/// `submitted`), as the steps from the first to the last: a range of several samples covers the
/// time since the range before it, one sample its own moment.
fn steps_during(
    whole: &[MetricBucket],
    submitted: chrono::DateTime<chrono::Utc>,
    (from, to): (f64, f64),
) -> Option<(u64, u64)> {
    let at = |b: &MetricBucket| (b.last_at - submitted).num_milliseconds() as f64 / 1000.0;
    let mut before = f64::NEG_INFINITY;
    let mut found: Option<(u64, u64)> = None;
    for b in whole {
        let end = at(b);
        let start = if b.samples > 1 { before } else { end };
        if end >= from && start <= to {
            found = Some(found.map_or((b.first_step, b.last_step), |(lo, hi)| {
                (lo.min(b.first_step), hi.max(b.last_step))
            }));
        }
        before = end;
    }
    found
}

/// The charts of `options`' metrics of `job` (submitted at `submitted`), one per metric.
pub(crate) async fn charts_svg(
    state: &AppState,
    scope: Scope,
    job: JobId,
    submitted: chrono::DateTime<chrono::Utc>,
    options: &ChartOptions,
) -> Result<Drawn, ApiError> {
    // One chart per metric, each on its own y axis: on a shared one a small metric (the learning
    // rate) was a flat line under a large one (the loss).
    let mut charts = String::new();
    let x = if options.time {
        XAxis::Elapsed(SINCE)
    } else {
        XAxis::Steps
    };
    let failed = |err| ApiError::from_store(err, || format!("no job `{}`", job.0));
    let mut drawn_steps: Option<(u64, u64)> = None;
    for name in &options.metrics {
        let buckets = match options.span.filter(|_| options.time) {
            // A span of time: the steps recorded in it, gathered afresh, then only what fell in it.
            Some(span) => {
                let whole = crate::series::buckets(state, scope, job, name)
                    .await
                    .map_err(failed)?;
                match steps_during(&whole, submitted, span) {
                    None => Vec::new(),
                    Some((lo, hi)) => {
                        drawn_steps =
                            Some(drawn_steps.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                        let range = StepRange {
                            from: Some(lo),
                            to: Some(hi),
                        };
                        let mut fine = crate::series::between(state, scope, job, name, range)
                            .await
                            .map_err(failed)?;
                        fine.retain(|b| {
                            let at = (b.last_at - submitted).num_milliseconds() as f64 / 1000.0;
                            at >= span.0 && at <= span.1
                        });
                        fine
                    }
                }
            }
            None if options.steps == StepRange::ALL => {
                crate::series::buckets(state, scope, job, name)
                    .await
                    .map_err(failed)?
            }
            None => crate::series::between(state, scope, job, name, options.steps)
                .await
                .map_err(failed)?,
        };
        let place = |b: &MetricBucket| {
            if options.time {
                (b.last_at - submitted).num_milliseconds() as f64 / 1000.0
            } else {
                (b.first_step + b.last_step) as f64 / 2.0
            }
        };
        // Smoothing runs over each range's mean; unsmoothed, a range shows its lowest and highest
        // value, so no spike is averaged away.
        let mut points = Vec::with_capacity(2 * buckets.len());
        for b in &buckets {
            let at = place(b);
            if options.smooth > 0.0 || b.samples == 1 {
                points.push((at, if options.smooth > 0.0 { b.mean } else { b.min }));
            } else {
                points.push((at, b.min));
                points.push((at, b.max));
            }
        }
        if options.time {
            // A job resumed from a checkpoint repeats steps later in time.
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let label = format!(
            "the job's {name} by {}",
            if options.time { "time" } else { "step" }
        );
        let mut chart = Chart::new(
            &label,
            x,
            name,
            vec![Series {
                name: name.clone(),
                points: smooth(&points, options.smooth),
            }],
        );
        chart.log_y = options.log;
        if !options.time
            && let (Some(from), Some(to)) = (options.steps.from, options.steps.to)
        {
            chart.x_range = Some((from as f64, to as f64));
        }
        if options.time
            && let Some((from, to)) = options.span
            && to.is_finite()
        {
            chart.x_range = Some((from, to));
        }
        charts.push_str(&chart.svg());
    }
    if options.metrics.is_empty() {
        // No metric chosen (or none reported yet): the empty chart says so.
        charts = Chart::new("the job's metrics by step", x, "value", Vec::new()).svg();
    }
    let steps = match options.span.filter(|_| options.time) {
        None => options.steps,
        // Nothing recorded in the span: an empty range (from above to).
        Some(_) => drawn_steps.map_or(
            StepRange {
                from: Some(1),
                to: Some(0),
            },
            |(lo, hi)| StepRange {
                from: Some(lo),
                to: Some(hi),
            },
        ),
    };
    Ok(Drawn { svg: charts, steps })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &str) -> QueryPairs {
        QueryPairs(serde_urlencoded::from_str(query).unwrap())
    }

    #[test]
    fn options_read_the_form_and_the_chart_link_alike_and_name_what_is_wrong() {
        let defaults = vec!["loss".to_owned()];
        let form = ChartOptions::parse(
            &pairs("metric=loss&metric=lr&log=on&smooth=0.5&x=time&from=10&to="),
            &defaults,
        )
        .unwrap();
        assert_eq!(form.metrics, ["loss", "lr"]);
        assert!(form.log && form.time);
        assert_eq!(
            form.steps,
            StepRange {
                from: Some(10),
                to: None
            }
        );
        let link = ChartOptions::parse(
            &pairs("metrics=loss,lr&log=true&smooth=0.5&x=time&from=10"),
            &[],
        )
        .unwrap();
        assert_eq!(link, form);
        // Nothing asked: the defaults; the form with every metric unticked: none.
        assert_eq!(
            ChartOptions::parse(&pairs(""), &defaults).unwrap().metrics,
            defaults
        );
        assert!(
            ChartOptions::parse(&pairs("x=step"), &defaults)
                .unwrap()
                .metrics
                .is_empty()
        );
        for (query, field) in [
            ("x=hours", "x"),
            ("smooth=2", "smooth"),
            ("from=-1", "from"),
            ("from=9&to=3", "to"),
            ("log=maybe", "log"),
        ] {
            let err = ChartOptions::parse(&pairs(query), &defaults).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{query}");
        }
        assert_eq!(
            form.csv_link(JobId(uuid::Uuid::nil()), form.steps),
            "/api/v1/jobs/00000000-0000-0000-0000-000000000000/metrics?format=csv&name=loss&name=lr&from_step=10"
        );
        // A span of time, by time alone and not with a range of steps.
        let span =
            ChartOptions::parse(&pairs("metric=loss&x=time&from_s=12.5&to_s=60"), &[]).unwrap();
        assert_eq!(span.span, Some((12.5, 60.0)));
        assert!(
            span.page_link(JobId(uuid::Uuid::nil()))
                .contains("from_s=12.5&to_s=60")
        );
        let open = ChartOptions::parse(&pairs("metric=loss&x=time&to_s=30"), &[]).unwrap();
        assert_eq!(open.span, Some((0.0, 30.0)));
        for (query, field) in [
            ("x=step&from_s=3", "from_s"),
            ("x=time&from=3&to_s=9", "to_s"),
            ("x=time&from_s=9&to_s=3", "to_s"),
            ("x=time&from_s=-1", "from_s"),
            ("x=time&to_s=inf", "to_s"),
        ] {
            let err = ChartOptions::parse(&pairs(query), &defaults).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{query}");
        }
    }

    /// A span of time covers the ranges recorded in it, and the range that ended first after it
    /// began (its samples fell in the span too); nothing when nothing was recorded in it.
    #[test]
    fn a_span_of_time_is_the_steps_recorded_in_it() {
        let submitted = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let bucket = |first_step, last_step, at_s: i64| MetricBucket {
            first_step,
            last_step,
            min: 1.0,
            max: 1.0,
            mean: 1.0,
            samples: 1 + last_step - first_step,
            last_at: submitted + chrono::Duration::seconds(at_s),
        };
        // Steps 0-99 by 10 s, 100-199 by 20 s, 200-299 by 30 s; resumed, 200-299 again by 50 s.
        let whole = [
            bucket(0, 99, 10),
            bucket(100, 199, 20),
            bucket(200, 299, 30),
            bucket(200, 299, 50),
        ];
        assert_eq!(
            steps_during(&whole, submitted, (12.0, 18.0)),
            Some((100, 199))
        );
        assert_eq!(steps_during(&whole, submitted, (0.0, 25.0)), Some((0, 299)));
        assert_eq!(
            steps_during(&whole, submitted, (40.0, 45.0)),
            Some((200, 299))
        );
        assert_eq!(steps_during(&whole, submitted, (60.0, 90.0)), None);
        assert_eq!(steps_during(&[], submitted, (0.0, 90.0)), None);
    }
}
