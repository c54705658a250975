//! The experiment pages: the tenant's hyper-parameter searches, and one experiment with its
//! best-so-far curve, every trial's curve overlaid, each numeric hyper-parameter against the metric,
//! and the trials table sorted by the metric or by trial. The same store calls and views as
//! `GET /api/v1/experiments` and `GET /api/v1/experiments/{id}`.

use crate::page::{Layout, error_page, render};
use crate::session::Session;
use crate::time::{Time, timestamp};
use axum::extract::State;
use axum::response::Response;
use drover_api::error::ApiError;
use drover_api::extract::{PathParam, QueryPairs};
use drover_api::state::AppState;
use drover_core::ExperimentId;
use drover_core::experiment::{DroverExperiment, Goal, Param};
use drover_plot::{Axis, Chart, Line, Parallel, Scale, Series, XAxis};
use drover_service::experiments::{TrialView, trials as trial_views};
use drover_store::{Experiment, ExperimentState, TrialSample};
use std::collections::BTreeMap;

/// Experiments the list shows at most.
const LIST_LIMIT: u32 = 200;
/// Trials whose curves are drawn at most (the best ones).
const CURVES: usize = 12;

#[derive(Debug)]
struct Row {
    id: String,
    name: String,
    tenant: String,
    state: String,
    searcher: String,
    metric: String,
    best: String,
    best_trial: String,
    created: Time,
}

fn row(experiment: &Experiment, document: Option<&DroverExperiment>) -> Row {
    Row {
        id: experiment.id.to_string(),
        name: experiment.name.clone(),
        tenant: experiment.tenant_name.clone(),
        state: experiment.state.to_string(),
        searcher: document.map_or_else(String::new, |d| d.spec.searcher.name().to_owned()),
        metric: document.map_or_else(String::new, |d| {
            let goal = match d.spec.metric.goal {
                Goal::Minimize => "min",
                Goal::Maximize => "max",
            };
            format!("{} ({goal})", d.spec.metric.name)
        }),
        best: experiment.best_value.map_or("—".to_owned(), value_text),
        best_trial: experiment
            .best_trial
            .map_or("—".to_owned(), |t| t.to_string()),
        created: timestamp(experiment.created_at),
    }
}

/// A parameter's value as a table or an axis shows it: whole numbers as they are, others to 4
/// significant digits (scientific notation far from 1), strings as they are, anything else as JSON.
fn choice_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(0.0) => "0".to_owned(),
            Some(x) if (1e-4..1e6).contains(&x.abs()) => {
                let decimals = (3 - x.abs().log10().floor() as i32).clamp(0, 8) as usize;
                let text = format!("{x:.decimals$}");
                if text.contains('.') {
                    text.trim_end_matches('0').trim_end_matches('.').to_owned()
                } else {
                    text
                }
            }
            Some(x) => format!("{x:.3e}"),
            None => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn value_text(value: f64) -> String {
    if value.abs() >= 1000.0 || value == 0.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.4}")
    }
}

fn document(experiment: &Experiment) -> Option<DroverExperiment> {
    serde_json::from_value(experiment.document.clone()).ok()
}

#[derive(askama::Template)]
#[template(path = "experiments.html")]
struct ListPage {
    layout: Layout,
    rows: Vec<Row>,
}

pub async fn list(State(state): State<AppState>, session: Session) -> Response {
    let experiments = match state
        .store
        .list_experiments(session.principal.scope(), None, LIST_LIMIT)
        .await
    {
        Ok(experiments) => experiments,
        Err(err) => return error_page(ApiError::from_store(err, || "experiments".into())),
    };
    let rows = experiments
        .iter()
        .map(|e| row(e, document(e).as_ref()))
        .collect();
    render(&ListPage {
        layout: session.layout("experiments"),
        rows,
    })
}

#[derive(Debug)]
struct TrialRow {
    trial: u32,
    state: String,
    value: String,
    step: String,
    /// Each parameter's value as shown, and as it sorts (a number's full value).
    params: Vec<(String, String)>,
    jobs: Vec<(String, String)>,
    note: String,
    best: bool,
}

#[derive(Debug, Default)]
struct Actions {
    pause: bool,
    resume: bool,
    cancel: bool,
}

#[derive(askama::Template)]
#[template(path = "experiment.html")]
struct DetailPage {
    layout: Layout,
    e: Row,
    message: String,
    sort: &'static str,
    trials: Vec<TrialRow>,
    /// The trials table's parameter columns.
    param_names: Vec<String>,
    best_curve: String,
    curves: String,
    /// Said when only the best trials' curves are drawn.
    curves_note: String,
    scatters: Vec<String>,
    /// Every trial's parameters and metric in one parallel-coordinates chart (empty without a
    /// readable document).
    parallel: String,
    /// The experiment still runs: the page refreshes its charts and trials.
    live: bool,
    actions: Actions,
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    PathParam(id): PathParam,
    query: QueryPairs,
) -> Response {
    match detail(&state, &session, &id, &query).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

/// What the curves chart leaves out, said beside it: empty when every trial with a value is drawn.
fn curves_note(with_values: usize) -> String {
    if with_values > CURVES {
        format!("The curves of the {CURVES} best of {with_values} trials are drawn.")
    } else {
        String::new()
    }
}

/// Each trial's curve, one point per step. A trial job that ran its command again (a restart, a
/// new segment) reports the same steps again; the newest report stands (the store returns samples
/// in trial, step, then arrival order).
fn curves_by_trial(samples: &[TrialSample]) -> BTreeMap<u32, Vec<(f64, f64)>> {
    let mut curves: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples {
        let points = curves.entry(s.trial).or_default();
        let point = (s.step as f64, s.value);
        match points.last_mut() {
            Some(last) if last.0 == point.0 => *last = point,
            _ => points.push(point),
        }
    }
    curves
}

async fn detail(
    state: &AppState,
    session: &Session,
    raw: &str,
    query: &QueryPairs,
) -> Result<DetailPage, ApiError> {
    query.only(&["sort"])?;
    let sort = match query.get("sort") {
        None | Some("value") => "value",
        Some("trial") => "trial",
        Some(other) => {
            return Err(ApiError::bad_request(
                "sort",
                format!("`{other}`: expected value or trial"),
            ));
        }
    };
    let missing = || ApiError::not_found(format!("no experiment `{raw}`"));
    let id: ExperimentId = raw.parse().map_err(|_| missing())?;
    let experiment = state
        .store
        .get_experiment(session.principal.scope(), id)
        .await
        .map_err(|err| ApiError::from_store(err, || format!("no experiment `{raw}`")))?;
    let parsed = document(&experiment);
    let goal = parsed
        .as_ref()
        .map_or(Goal::Minimize, |d| d.spec.metric.goal);
    let metric = parsed
        .as_ref()
        .map_or_else(String::new, |d| d.spec.metric.name.clone());
    let views = trial_views(state, &experiment).await?;
    let loss = |v: Option<f64>| v.map_or(f64::INFINITY, |v| goal.loss(v));
    let samples = state
        .store
        .experiment_samples(experiment.id, &metric)
        .await
        .map_err(|err| ApiError::from_store(err, || "experiment".into()))?;
    let mut curves = curves_by_trial(&samples);

    // Best so far, by trial index: each trial's final (else last) value.
    let mut best_so_far = Vec::new();
    let mut best: Option<f64> = None;
    for view in &views {
        if let Some(v) = view.last_value
            && best.is_none_or(|b| goal.loss(v) < goal.loss(b))
        {
            best = Some(v);
        }
        if let Some(b) = best {
            best_so_far.push((f64::from(view.trial), b));
        }
    }
    let best_curve = Chart {
        label: "the best value found, by trial",
        x: XAxis::Trials,
        y_label: &metric,
        log_y: false,
        x_range: None,
        title: None,
        log_x: false,
        y_range: None,
        x_ticks: None,
        y_ticks: None,
        guides: Vec::new(),
        markers: false,
        series: vec![Series {
            name: format!("best {metric}"),
            points: best_so_far,
        }],
    }
    .svg();
    // The best trials' curves, overlaid.
    let mut ranked: Vec<&TrialView> = views.iter().filter(|v| v.last_value.is_some()).collect();
    ranked.sort_by(|a, b| loss(a.best_value).total_cmp(&loss(b.best_value)));
    let curves_note = curves_note(ranked.len());
    let curves_svg = Chart {
        label: "each trial's metric by step (the best trials)",
        x: XAxis::Steps,
        y_label: &metric,
        log_y: false,
        x_range: None,
        title: None,
        log_x: false,
        y_range: None,
        x_ticks: None,
        y_ticks: None,
        guides: Vec::new(),
        markers: false,
        series: ranked
            .iter()
            .take(CURVES)
            .map(|v| Series {
                name: format!("trial {}", v.trial),
                points: curves.remove(&v.trial).unwrap_or_default(),
            })
            .collect(),
    }
    .svg();
    // Each hyper-parameter against the metric, one scatter per parameter: numbers on their own
    // axis (logarithmic, labelled in the parameter's values, where the space is), a categorical
    // parameter's choices each at its place, labelled with the choice.
    let mut scatters = Vec::new();
    if let Some(d) = &parsed {
        for (name, param) in &d.spec.parameters {
            let (log, choices) = match param {
                Param::Int { log, .. } | Param::Double { log, .. } => (*log, None),
                Param::LogUniform { .. } => (true, None),
                Param::Categorical { values, .. } => (false, Some(values)),
                Param::Const { .. } => continue,
            };
            let points: Vec<(f64, f64)> = views
                .iter()
                .filter_map(|v| {
                    let value = v.params.get(name)?;
                    let x = match choices {
                        Some(choices) => choices.iter().position(|c| c == value)? as f64,
                        None => value.as_f64()?,
                    };
                    Some((x, v.last_value?))
                })
                .collect();
            let label = format!("{name} against {metric}");
            let x_ticks = choices.map(|choices| {
                choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (i as f64, choice_text(c)))
                    .collect()
            });
            let x_range = choices.map(|choices| (-0.5, choices.len() as f64 - 0.5));
            let mut scatter = Chart::new(
                &label,
                XAxis::Named(name),
                &metric,
                vec![Series {
                    name: format!("{} trials", points.len()),
                    points,
                }],
            );
            scatter.markers = true;
            scatter.log_x = log;
            scatter.x_range = x_range;
            scatter.x_ticks = x_ticks;
            scatters.push(scatter.svg());
        }
    }
    // Every searched parameter together, then the metric: an axis each, a line per trial.
    let parallel = parsed.as_ref().map_or_else(String::new, |d| {
        let searched: Vec<(&String, &Param)> = d
            .spec
            .parameters
            .iter()
            .filter(|(_, p)| !matches!(p, Param::Const { .. }))
            .collect();
        let mut axes: Vec<Axis> = searched
            .iter()
            .map(|(name, param)| Axis {
                name: (*name).clone(),
                scale: match param {
                    Param::Int { log: true, .. }
                    | Param::Double { log: true, .. }
                    | Param::LogUniform { .. } => Scale::Log,
                    Param::Categorical { values, .. } => {
                        Scale::Categories(values.iter().map(choice_text).collect())
                    }
                    _ => Scale::Linear,
                },
            })
            .collect();
        axes.push(Axis {
            name: metric.clone(),
            scale: Scale::Linear,
        });
        let lines = views
            .iter()
            .filter(|v| v.last_value.is_some())
            .map(|v| Line {
                name: format!("trial {}", v.trial),
                values: searched
                    .iter()
                    .map(|(name, param)| {
                        let value = v.params.get(name.as_str())?;
                        match param {
                            Param::Categorical { values, .. } => {
                                values.iter().position(|c| c == value).map(|i| i as f64)
                            }
                            _ => value.as_f64(),
                        }
                    })
                    .chain(std::iter::once(v.last_value))
                    .collect(),
            })
            .collect();
        let label = format!("every trial's parameters and {metric}");
        Parallel {
            label: &label,
            axes,
            lines,
            lower_is_better: d.spec.metric.goal == Goal::Minimize,
        }
        .svg()
    });
    // The table's parameter columns: the document's parameters in order, else the trials' own.
    let param_names: Vec<String> = match &parsed {
        Some(d) => d.spec.parameters.keys().cloned().collect(),
        None => {
            let mut names: Vec<String> = views
                .iter()
                .filter_map(|v| v.params.as_object())
                .flat_map(|m| m.keys().cloned())
                .collect();
            names.sort();
            names.dedup();
            names
        }
    };
    let best_trial = experiment.best_trial;
    let mut trials: Vec<TrialRow> = views
        .iter()
        .map(|v| TrialRow {
            trial: v.trial,
            state: v.state.clone(),
            value: v.last_value.map_or("—".to_owned(), value_text),
            step: v.last_step.map_or("—".to_owned(), |s| s.to_string()),
            params: param_names
                .iter()
                .map(|name| match v.params.get(name) {
                    // A conditional parameter the trial did not take.
                    None => ("—".to_owned(), String::new()),
                    Some(value) => (
                        choice_text(value),
                        value
                            .as_f64()
                            .map_or_else(|| choice_text(value), |n| n.to_string()),
                    ),
                })
                .collect(),
            jobs: v
                .jobs
                .iter()
                .filter_map(|j| Some((j.job_id.clone()?, j.name.clone().unwrap_or_default())))
                .collect(),
            note: match (&v.stop_reason, v.source_trial, v.promise, v.doomed) {
                (Some(reason), ..) => reason.clone(),
                (None, _, Some(_), Some(true)) => {
                    "doomed: the searcher does not expect to keep it; it yields its GPU to the \
                     experiment's other trials first"
                        .to_owned()
                }
                (None, source, Some(promise), _) => {
                    let from = source
                        .map_or_else(String::new, |s| format!("from trial {s}'s checkpoint; "));
                    format!("{from}promise {promise:.2}")
                }
                (None, Some(source), None, _) => format!("from trial {source}'s checkpoint"),
                (None, None, None, _) => String::new(),
            },
            best: Some(v.trial) == best_trial,
        })
        .collect();
    if sort == "value" {
        let by_value: BTreeMap<u32, f64> = views
            .iter()
            .map(|v| (v.trial, loss(v.last_value)))
            .collect();
        trials.sort_by(|a, b| {
            by_value[&a.trial]
                .total_cmp(&by_value[&b.trial])
                .then(a.trial.cmp(&b.trial))
        });
    }
    let writer =
        session.principal.user.cluster_admin || session.principal.user.role.can_write_jobs();
    let actions = Actions {
        pause: writer && experiment.state == ExperimentState::Active,
        resume: writer && experiment.state == ExperimentState::Paused,
        cancel: writer && !experiment.state.is_terminal(),
    };
    Ok(DetailPage {
        layout: session.layout("experiments"),
        message: experiment.message.clone(),
        e: row(&experiment, parsed.as_ref()),
        sort,
        trials,
        param_names,
        best_curve,
        curves: curves_svg,
        curves_note,
        scatters,
        parallel,
        live: !experiment.state.is_terminal(),
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the 12 curves drawn, the page says how many trials' curves are left out (16 trials
    /// showed 12 curves without saying so).
    #[test]
    fn the_curves_chart_says_when_it_draws_only_the_best() {
        assert_eq!(
            curves_note(16),
            "The curves of the 12 best of 16 trials are drawn."
        );
        assert_eq!(curves_note(CURVES), "");
        assert_eq!(curves_note(0), "");
    }

    fn sample(trial: u32, segment: u32, step: u64, value: f64) -> TrialSample {
        TrialSample {
            trial,
            segment,
            step,
            value,
        }
    }

    #[test]
    fn a_step_reported_twice_is_one_point_the_newest() {
        let curves = curves_by_trial(&[
            sample(0, 0, 1, 5.0),
            sample(0, 1, 1, 4.0),
            sample(0, 1, 2, 3.0),
            sample(1, 0, 1, 9.0),
        ]);
        assert_eq!(curves[&0], vec![(1.0, 4.0), (2.0, 3.0)]);
        assert_eq!(curves[&1], vec![(1.0, 9.0)]);
    }

    #[test]
    fn parameter_values_read_as_their_units() {
        use serde_json::json;
        let text = |v| choice_text(&v);
        assert_eq!(text(json!(0.001234567)), "0.001235");
        assert_eq!(text(json!(12.3456)), "12.35");
        assert_eq!(text(json!(1500.0)), "1500");
        assert_eq!(text(json!(3e-7)), "3.000e-7");
        assert_eq!(text(json!(64)), "64");
        assert_eq!(text(json!("adamw")), "adamw");
        assert_eq!(text(json!([1, 2])), "[1,2]");
    }
}
