//! A job's whole log, a page at a time (`/jobs/{id}/logs`): the newest lines first or from the first
//! line on, back and forth by page, filtered by task and generation, searched (matches marked), its
//! contract lines (metrics, checkpoint announcements) hidden unless asked, and downloaded as text
//! with the same filter (the API's `format=text`). Reads go through [`drover_service::logs`]. Works
//! without script; with it, the newest page follows the job's new lines (the API's followed log).

use crate::page::{Layout, error_page, render};
use crate::session::Session;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_api::error::ApiError;
use drover_api::state::AppState;
use drover_service::logs::LogQuery;
use drover_store::{LogFilter, LogLine, LogWindow};
use serde::Deserialize;

/// Lines on one page.
const PAGE: u32 = 500;

/// What a log page asks for: the filter (as the API takes it) and where the page lies.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    task: String,
    #[serde(default)]
    generation: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    metrics: String,
    /// The lines just before this line id.
    #[serde(default)]
    before: String,
    /// The lines after this line id (`0`: from the first line).
    #[serde(default)]
    after: String,
}

impl LogsQuery {
    fn filter(&self) -> Result<LogFilter, ApiError> {
        // A form's empty field is no filter.
        fn given(value: &str) -> Option<&str> {
            Some(value).filter(|v| !v.is_empty())
        }
        Ok(drover_service::logs::filter(LogQuery {
            task: given(&self.task),
            generation: given(&self.generation),
            search: given(&self.q),
            metrics: given(&self.metrics),
        })?)
    }

    fn window(&self) -> Result<LogWindow, ApiError> {
        let id = |raw: &str, field: &str| {
            raw.parse::<i64>()
                .ok()
                .filter(|id| *id >= 0)
                .ok_or_else(|| ApiError::bad_request(field, "not a line id"))
        };
        match (self.before.as_str(), self.after.as_str()) {
            ("", "") => Ok(LogWindow::LAST),
            (before, "") => Ok(LogWindow::before(id(before, "before")?)),
            ("", after) => Ok(LogWindow::after(id(after, "after")?)),
            _ => Err(ApiError::bad_request(
                "before",
                "give before or after, not both",
            )),
        }
    }

    /// The filter's part of a link: the parameters that are set.
    fn filter_pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("task", self.task.as_str()),
            ("generation", self.generation.as_str()),
            ("q", self.q.as_str()),
            ("metrics", self.metrics.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
    }

    /// `base` with this page's filter and `more` parameters (a window: `before` or `after` and an
    /// id; none for the newest lines).
    fn link(&self, base: &str, more: &[(&str, String)]) -> String {
        let mut pairs: Vec<(&str, &str)> = self.filter_pairs();
        pairs.extend(more.iter().map(|(k, v)| (*k, v.as_str())));
        let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
        if query.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{query}")
        }
    }
}

/// One line as the page shows it: its task and time, its text in parts, the search's matches
/// marked.
struct LineRow {
    id: i64,
    meta: String,
    time: String,
    stderr: bool,
    contract: bool,
    parts: Vec<(String, bool)>,
}

#[derive(askama::Template)]
#[template(path = "logs.html")]
struct LogsPage {
    layout: Layout,
    id: String,
    name: String,
    /// The task names the job has had, for the filter's choice.
    tasks: Vec<String>,
    generations: Vec<u64>,
    task: String,
    generation: String,
    q: String,
    metrics: bool,
    error: Option<String>,
    lines: Vec<LineRow>,
    /// What the page holds, in words.
    shown: String,
    oldest: Option<String>,
    older: Option<String>,
    newer: Option<String>,
    newest: Option<String>,
    download: String,
    /// The followed log the script reads new lines from: the newest page of a job still running.
    follow: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(query): Query<LogsQuery>,
) -> Response {
    match logs_page(&state, &session, &id, query).await {
        Ok(page) => render(&page),
        Err(err) => error_page(err),
    }
}

/// `text` cut into parts, those that match `needle` (ASCII case ignored) marked.
fn marked(text: &str, needle: Option<&str>) -> Vec<(String, bool)> {
    let Some(needle) = needle.filter(|n| !n.is_empty()) else {
        return vec![(text.to_owned(), false)];
    };
    // ASCII lowercasing keeps every byte offset, so offsets in the folded text cut the original.
    let folded = text.to_ascii_lowercase();
    let needle = needle.to_ascii_lowercase();
    let mut parts = Vec::new();
    let mut at = 0;
    while let Some(found) = folded[at..].find(&needle) {
        let start = at + found;
        let end = start + needle.len();
        if start > at {
            parts.push((text[at..start].to_owned(), false));
        }
        parts.push((text[start..end].to_owned(), true));
        at = end;
    }
    if at < text.len() || parts.is_empty() {
        parts.push((text[at..].to_owned(), false));
    }
    parts
}

fn row(line: &LogLine, needle: Option<&str>) -> LineRow {
    LineRow {
        id: line.id,
        meta: format!("g{} {}-{}", line.generation, line.role.as_str(), line.index),
        time: line.logged_at.format("%H:%M:%S%.3f").to_string(),
        stderr: line.stream == "stderr",
        contract: line.contract,
        parts: marked(&line.line, needle),
    }
}

async fn logs_page(
    state: &AppState,
    session: &Session,
    id: &str,
    query: LogsQuery,
) -> Result<LogsPage, ApiError> {
    let detail = drover_service::jobs::get(state, &session.principal, id).await?;
    let job = detail.job;
    let base = format!("/jobs/{}/logs", job.id);
    let tasks = state
        .store
        .job_tasks(session.principal.scope(), job.id)
        .await?;
    let mut task_names: Vec<String> = tasks
        .iter()
        .map(|t| format!("{}-{}", t.key.role.as_str(), t.key.index))
        .collect();
    task_names.sort_by(|a, b| {
        b.starts_with("worker")
            .cmp(&a.starts_with("worker"))
            .then(a.cmp(b))
    });
    task_names.dedup();
    let mut generations: Vec<u64> = tasks.iter().map(|t| t.key.generation).collect();
    generations.sort_unstable();
    generations.dedup();
    // A filter or window that cannot be read is said on the page; the newest lines are shown.
    let (query, filter, window, error) = match query.filter().and_then(|f| Ok((f, query.window()?)))
    {
        Ok((filter, window)) => (query, filter, window, None),
        Err(err) => (
            LogsQuery::default(),
            LogFilter {
                hide_contract: true,
                ..LogFilter::default()
            },
            LogWindow::LAST,
            Some(match &err.field {
                Some(field) => format!("{field}: {}", err.message),
                None => err.message.clone(),
            }),
        ),
    };
    let page = drover_service::logs::page(state, &session.principal, job.id, &filter, window, PAGE)
        .await?;
    let needle = filter.contains.as_deref();
    let lines: Vec<LineRow> = page.lines.iter().map(|l| row(l, needle)).collect();
    let last = page.lines.last().map(|l| l.id);
    let at_end = page.later.is_none();
    let filtered = filter
        != LogFilter {
            hide_contract: true,
            ..LogFilter::default()
        };
    let what = if filtered { "matching lines" } else { "lines" };
    let shown = match lines.len() {
        0 if filtered => "No line matches this filter.".to_owned(),
        0 => "No lines yet.".to_owned(),
        n if window == LogWindow::LAST => format!("The newest {n} {what}."),
        n if window == LogWindow::after(0) => format!("The first {n} {what}."),
        n => format!("{n} {what}."),
    };
    // A search reads a span of lines a page; it says so, and the links go on from where it stopped.
    let shown = if page.search_stopped {
        let span = drover_service::logs::SEARCH_SPAN;
        let side = if window.last { "earlier" } else { "later" };
        format!(
            "{shown} A search reads {} lines a page: {side} lines are not searched yet (the {side} link goes on).",
            crate::jobs::thousands(u64::from(span))
        )
    } else {
        shown
    };
    let api = format!("/api/v1/jobs/{}/logs", job.id);
    // From the newest line shown: the followed log passes on what the filter lets through.
    let follow = (at_end && !job.state.is_final()).then(|| {
        query.link(
            &api,
            &[
                ("follow", "true".to_owned()),
                ("cursor", last.unwrap_or(0).to_string()),
            ],
        )
    });
    Ok(LogsPage {
        layout: session.layout("jobs"),
        id: job.id.to_string(),
        name: job.name,
        tasks: task_names,
        generations,
        task: query.task.clone(),
        generation: query.generation.clone(),
        q: query.q.clone(),
        metrics: !filter.hide_contract,
        error,
        shown,
        oldest: page
            .earlier
            .is_some()
            .then(|| query.link(&base, &[("after", "0".to_owned())])),
        older: page
            .earlier
            .map(|id| query.link(&base, &[("before", id.to_string())])),
        newer: page
            .later
            .map(|id| query.link(&base, &[("after", id.to_string())])),
        newest: (!at_end || window != LogWindow::LAST).then(|| query.link(&base, &[])),
        download: query.link(&api, &[("format", "text".to_owned())]),
        follow,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::marked;

    #[test]
    fn search_matches_are_marked_ignoring_ascii_case() {
        assert_eq!(
            marked("Loss 0.5, val loss 0.7", Some("LOSS")),
            [
                ("Loss".to_owned(), true),
                (" 0.5, val ".to_owned(), false),
                ("loss".to_owned(), true),
                (" 0.7".to_owned(), false),
            ]
        );
        assert_eq!(marked("é loss", Some("loss"))[1], ("loss".to_owned(), true));
        assert_eq!(marked("abc", None), [("abc".to_owned(), false)]);
        assert_eq!(marked("", Some("x")), [(String::new(), false)]);
    }
}
