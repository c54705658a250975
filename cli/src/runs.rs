//! Client verbs about what running jobs produce: `logs` (with `-f`), `metrics`, `checkpoints`, and
//! `download` of a checkpoint.

use crate::client::{Client, segment};
use crate::commands::job_segment;
use crate::global::GlobalArgs;
use crate::output::out;
use crate::output::{self, Format};
use anyhow::{Context, bail};
use drover_core::spec::TaskRange;
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The job's id.
    pub id: String,
    /// Keep streaming new lines until the job ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines (then, with --follow, the new ones).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub tail: Option<u32>,
    /// Only this task's lines (`worker-0`, `ps-1`, …).
    #[arg(long)]
    pub task: Option<String>,
    /// Only this generation's lines.
    #[arg(long)]
    pub generation: Option<u64>,
    /// Only lines containing this text (ASCII case ignored).
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// Include contract lines (`{"drover": "metrics"|"checkpoint", …}`), left out by default.
    #[arg(long)]
    pub metrics: bool,
}

impl LogsArgs {
    /// The filter's query parameters, URL-encoded, each after a `&`.
    fn filter_query(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(task) = &self.task {
            pairs.push(("task", task.clone()));
        }
        if let Some(generation) = self.generation {
            pairs.push(("generation", generation.to_string()));
        }
        if let Some(text) = &self.grep {
            pairs.push(("q", text.clone()));
        }
        if self.metrics {
            pairs.push(("metrics", "true".to_owned()));
        }
        if pairs.is_empty() {
            String::new()
        } else {
            format!(
                "&{}",
                serde_urlencoded::to_string(&pairs).unwrap_or_default()
            )
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// The job's id.
    pub id: String,
    /// Only these metrics (comma-separated or repeated).
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// Only steps from this one.
    #[arg(long)]
    pub from_step: Option<u64>,
    /// Only steps up to this one.
    #[arg(long)]
    pub to_step: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct DownloadArgs {
    /// The job's id.
    pub id: String,
    /// The checkpoint's id; the job's latest checkpoint when absent.
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// Where to write it (default: the checkpoint's file name, `.tar` for a directory).
    #[arg(long = "to")]
    pub destination: Option<PathBuf>,
    /// Replace the file if it exists.
    #[arg(long)]
    pub force: bool,
}

fn print_line(line: &Value) {
    let task = output::text(&line["task"]);
    let text = line["line"].as_str().unwrap_or_default();
    out!("[{task} g{}] {text}", output::text(&line["generation"]));
}

pub async fn logs(global: &GlobalArgs, args: LogsArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let filter = args.filter_query();
    let print = |line: &Value| match global.output {
        Format::Json => out!("{line}"),
        Format::Table => print_line(line),
    };
    // The last lines first, with --tail; where following goes on from.
    let mut last: Option<i64> = None;
    if let Some(n) = args.tail {
        // The newest line, shown or not: the last lines end at it and following goes on after it,
        // so no line falls between them and what the filter leaves out is not read again.
        let newest = client
            .get(&format!(
                "/api/v1/jobs/{id}/logs?tail=true&limit=1&metrics=true"
            ))
            .await?;
        let newest = newest["logs"][0]["id"].as_i64().unwrap_or(0);
        let page = client
            .get(&format!(
                "/api/v1/jobs/{id}/logs?before={}&limit={n}{filter}",
                newest + 1
            ))
            .await?;
        let lines = page["logs"].as_array().map_or(&[][..], Vec::as_slice);
        lines.iter().for_each(print);
        if !args.follow {
            return Ok(());
        }
        last = Some(newest);
    } else if !args.follow {
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!(
                    "/api/v1/jobs/{id}/logs?limit=5000&cursor={}{filter}",
                    segment(c)
                ),
                None => format!("/api/v1/jobs/{id}/logs?limit=5000{filter}"),
            };
            let page = client.get(&path).await?;
            let lines = page["logs"].as_array().map_or(&[][..], Vec::as_slice);
            lines.iter().for_each(print);
            let next = page["meta"]["next_cursor"].as_str().map(str::to_owned);
            if page["meta"]["more"] != true || next.is_none() || next == cursor {
                return Ok(());
            }
            cursor = next;
        }
    }
    // The server ends a followed stream now and then (its lifetime, a restart): follow on from the
    // last line's id until the job has ended.
    loop {
        let path = match last {
            Some(id_seen) => {
                format!("/api/v1/jobs/{id}/logs?follow=true&cursor={id_seen}{filter}")
            }
            None => format!("/api/v1/jobs/{id}/logs?follow=true{filter}"),
        };
        let response = client.get_streaming(&path).await?;
        let mut body = response.bytes_stream();
        let mut buffer = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.context("the log stream broke")?;
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let Ok(value) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                last = value["id"].as_i64().or(last);
                print(&value);
            }
        }
        let job = client.get(&format!("/api/v1/jobs/{id}")).await?;
        let state = job["job"]["state"].as_str().unwrap_or_default();
        if matches!(state, "succeeded" | "failed" | "cancelled") {
            return Ok(());
        }
    }
}

pub async fn metrics(global: &GlobalArgs, args: MetricsArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let mut query: Vec<(&str, String)> = vec![("limit", "5000".to_owned())];
    for name in args.names.iter().flat_map(|n| n.split(',')) {
        query.push(("name", name.trim().to_owned()));
    }
    if let Some(from) = args.from_step {
        query.push(("from_step", from.to_string()));
    }
    if let Some(to) = args.to_step {
        query.push(("to_step", to.to_string()));
    }
    let query = serde_urlencoded::to_string(&query).context("cannot encode the query")?;
    // Every page, in step order: a long job has more samples than one page holds.
    let id = job_segment(&client, &args.id).await?;
    let samples = client
        .all_pages(&format!("/api/v1/jobs/{id}/metrics?{query}"), "metrics")
        .await?;
    match global.output {
        Format::Json => output::json(&serde_json::json!({
            "metrics": samples,
            "meta": {"next_cursor": null},
        })),
        Format::Table => {
            let rows: Vec<Vec<String>> = samples
                .iter()
                .map(|m| {
                    vec![
                        output::text(&m["step"]),
                        output::text(&m["name"]),
                        m["value"]
                            .as_f64()
                            .map_or_else(String::new, |v| format!("{v:.6}")),
                        format!(
                            "{}/{}",
                            output::text(&m["num_ps"]),
                            output::text(&m["num_workers"])
                        ),
                        output::text(&m["generation"]),
                    ]
                })
                .collect();
            output::table(
                &["STEP", "NAME", "VALUE", "PS/WORKERS", "GENERATION"],
                &rows,
            );
            if samples.is_empty() {
                eprintln!("(no metrics reported yet)");
            }
        }
    }
    Ok(())
}

/// Asks a running job to checkpoint now (its tasks get SIGUSR1).
pub async fn request_checkpoint(
    global: &GlobalArgs,
    args: crate::commands::JobIdArg,
) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let response = client
        .post_json(
            &format!("/api/v1/jobs/{id}/checkpoint"),
            &serde_json::json!({}),
        )
        .await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => out!(
            "asked {} task(s) to checkpoint; `drover checkpoints {}` lists it once written",
            output::text(&response["tasks"]),
            args.id
        ),
    }
    Ok(())
}

pub async fn checkpoints(
    global: &GlobalArgs,
    args: crate::commands::JobIdArg,
) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let response = client
        .get(&format!("/api/v1/jobs/{id}/checkpoints"))
        .await?;
    let checkpoints = response["checkpoints"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let rows: Vec<Vec<String>> = checkpoints
                .iter()
                .map(|c| {
                    vec![
                        output::text(&c["id"]),
                        output::text(&c["step"]),
                        output::text(&c["generation"]),
                        output::text(&c["size_bytes"]),
                        output::text(&c["created_at"]),
                    ]
                })
                .collect();
            output::table(&["ID", "STEP", "GENERATION", "BYTES", "CREATED"], &rows);
            if checkpoints.is_empty() {
                eprintln!("(no checkpoints recorded yet)");
            }
        }
    }
    Ok(())
}

pub async fn download(global: &GlobalArgs, args: DownloadArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let checkpoint = match args.checkpoint {
        Some(checkpoint) => checkpoint,
        None => {
            let list = client
                .get(&format!("/api/v1/jobs/{id}/checkpoints"))
                .await?;
            let latest = list["checkpoints"]
                .as_array()
                .and_then(|c| c.last())
                .map(|c| output::text(&c["id"]));
            match latest {
                Some(latest) => latest,
                None => bail!("job {id} has no recorded checkpoint yet"),
            }
        }
    };
    let response = client
        .get_streaming(&format!(
            "/api/v1/jobs/{id}/checkpoints/{}/download",
            segment(&checkpoint)
        ))
        .await?;
    let suggested = response
        .headers()
        .get(reqwest::header::CONTENT_DISPOSITION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("filename=\"").nth(1))
        .map(|v| v.trim_end_matches('"').replace(['/', '\\'], "_"))
        .unwrap_or_else(|| format!("checkpoint-{checkpoint}"));
    let path = args.destination.unwrap_or_else(|| PathBuf::from(suggested));
    if !args.force && path.exists() {
        bail!(
            "{} exists: pass --force to replace it, or --to another path",
            path.display()
        );
    }
    // Written beside it under a temporary name and renamed once whole: a download that breaks
    // leaves nothing behind under the final name.
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut part = tempfile::Builder::new()
        .prefix(".drover-download-")
        .suffix(".part")
        .tempfile_in(&dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let mut body = response.bytes_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.context("the download broke; nothing was written")?;
        part.write_all(&chunk)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        bytes += chunk.len() as u64;
    }
    part.as_file().sync_all()?;
    part.persist(&path)
        .map_err(|err| err.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {} ({bytes} bytes)", path.display());
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct ResizeArgs {
    /// The job's id.
    pub id: String,
    /// Workers: a count (`2`) or a range (`1..4`, elastic).
    #[arg(long, value_parser = parse_range)]
    pub workers: Option<TaskRange>,
    /// Parameter-server shards: a count or a range.
    #[arg(long, value_parser = parse_range)]
    pub ps: Option<TaskRange>,
}

fn parse_range(raw: &str) -> Result<TaskRange, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{raw}` is not a count (`2`) or a range (`1..4`)"))
    };
    match raw.split_once("..") {
        Some((min, max)) => Ok(TaskRange {
            min: number(min)?,
            max: number(max)?,
        }),
        None => {
            let n = number(raw)?;
            Ok(TaskRange { min: n, max: n })
        }
    }
}

/// Changes a running (or queued) job's worker and PS ranges; the scheduler re-plans it.
pub async fn resize(global: &GlobalArgs, args: ResizeArgs) -> anyhow::Result<()> {
    if args.workers.is_none() && args.ps.is_none() {
        bail!("give --workers and/or --ps");
    }
    let client = Client::new(global).await?;
    let mut body = serde_json::Map::new();
    if let Some(w) = args.workers {
        body.insert("workers".into(), json!({"min": w.min, "max": w.max}));
    }
    if let Some(p) = args.ps {
        body.insert("ps".into(), json!({"min": p.min, "max": p.max}));
    }
    let response = client
        .post_json(
            &format!(
                "/api/v1/jobs/{}/resize",
                job_segment(&client, &args.id).await?
            ),
            &Value::Object(body),
        )
        .await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            // `job.spec` is the job's whole document; its `spec` holds the resources.
            let resources = &response["job"]["spec"]["spec"]["resources"];
            out!(
                "job {}: workers {}..{}, PS {}..{}; the scheduler re-plans it (see `drover events {}`)",
                output::text(&response["job"]["name"]),
                resources["workers"]["min"],
                resources["workers"]["max"],
                resources["ps"]["min"],
                resources["ps"]["max"],
                args.id
            );
        }
    }
    Ok(())
}
