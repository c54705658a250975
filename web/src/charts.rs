//! A job's metric charts, on its page and at `GET /jobs/{id}/chart` (which the page's controls and
//! live updates redraw without a reload): one chart per metric on its own axis, by step or by time
//! since the job was submitted, over every step or a range of them (a zoom, gathered afresh at full
//! resolution), on a log scale or smoothed. The options read the same from the page's URL (the form
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
}

impl ChartOptions {
    /// The options a query asks for: `metric` (repeated; or `metrics`, comma-separated), `log`,
    /// `smooth` (0 to 0.99), `x` (`step` or `time`), `from` and `to` (steps, both included; empty
    /// means open). With neither metrics nor `x` given, `defaults` are drawn. A value that cannot
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
        Ok(ChartOptions {
            metrics,
            log,
            smooth,
            time,
            steps,
        })
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
        format!(
            "/jobs/{}?{}#metrics-title",
            job.0,
            serde_urlencoded::to_string(&pairs).unwrap_or_default()
        )
    }

    /// The CSV of the metrics drawn, over the range drawn.
    pub fn csv_link(&self, job: JobId) -> String {
        let mut pairs: Vec<(&str, String)> = vec![("format", "csv".to_owned())];
        pairs.extend(self.metrics.iter().map(|name| ("name", name.clone())));
        if let Some(from) = self.steps.from {
            pairs.push(("from_step", from.to_string()));
        }
        if let Some(to) = self.steps.to {
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
        charts_svg(&state, scope, job_id, job.created_at, &options).await
    };
    match drawn.await {
        Ok(svg) => (
            crate::page::PAGE_HEADERS,
            [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
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

/// The charts of `options`' metrics of `job` (submitted at `submitted`), one per metric.
pub(crate) async fn charts_svg(
    state: &AppState,
    scope: Scope,
    job: JobId,
    submitted: chrono::DateTime<chrono::Utc>,
    options: &ChartOptions,
) -> Result<String, ApiError> {
    // One chart per metric, each on its own y axis: on a shared one a small metric (the learning
    // rate) was a flat line under a large one (the loss).
    let mut charts = String::new();
    let x = if options.time {
        XAxis::Elapsed(SINCE)
    } else {
        XAxis::Steps
    };
    for name in &options.metrics {
        let buckets = if options.steps == StepRange::ALL {
            crate::series::buckets(state, scope, job, name).await
        } else {
            crate::series::between(state, scope, job, name, options.steps).await
        }
        .map_err(|err| ApiError::from_store(err, || format!("no job `{}`", job.0)))?;
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
        charts.push_str(&chart.svg());
    }
    if options.metrics.is_empty() {
        // No metric chosen (or none reported yet): the empty chart says so.
        charts = Chart::new("the job's metrics by step", x, "value", Vec::new()).svg();
    }
    Ok(charts)
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
            form.csv_link(JobId(uuid::Uuid::nil())),
            "/api/v1/jobs/00000000-0000-0000-0000-000000000000/metrics?format=csv&name=loss&name=lr&from_step=10"
        );
    }
}
