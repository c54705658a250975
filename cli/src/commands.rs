//! The client verbs: each calls the REST API and prints a table (or JSON with `-o json`).

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::out;
use crate::output::{self, Format};
use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::{Value, json};
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// A DroverJob as YAML or JSON; `-` reads standard input.
    pub file: PathBuf,
    /// Makes the submission safe to repeat: the same key returns the first job. A random one is used
    /// when absent, so the CLI's own retries never create twins.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Only jobs in these states (comma-separated).
    #[arg(long)]
    pub state: Option<String>,
    /// Only jobs with these labels (`key=value`, comma-separated or repeated).
    #[arg(short = 'l', long = "label")]
    pub labels: Vec<String>,
    /// Only this tenant's jobs (cluster administrators).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Jobs per page.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Follow the cursor through every page.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, clap::Args)]
pub struct JobIdArg {
    /// The job's id.
    pub id: String,
}

/// The path segment of the job `id_or_name` names: an id as it is; otherwise the one job of that
/// exact name the caller can see (names are unique within a tenant; a cluster administrator who
/// sees two tenants' jobs of one name is told their ids).
pub(crate) async fn job_segment(client: &Client, id_or_name: &str) -> anyhow::Result<String> {
    if id_or_name.parse::<uuid::Uuid>().is_ok() {
        return Ok(segment(id_or_name));
    }
    let query = serde_urlencoded::to_string([("name", id_or_name), ("limit", "500")])
        .context("cannot encode the query")?;
    let listed = client.get(&format!("/api/v1/jobs?{query}")).await?;
    let named: Vec<&Value> = listed["jobs"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter(|job| job["name"].as_str() == Some(id_or_name))
        .collect();
    match named.as_slice() {
        [job] => Ok(segment(&output::text(&job["id"]))),
        [] => bail!(
            "no job `{id_or_name}`: give a job's id or its exact name (`drover jobs` lists them)"
        ),
        several => bail!(
            "{} jobs are named `{id_or_name}`: give one of their ids ({})",
            several.len(),
            several
                .iter()
                .map(|job| format!(
                    "{} in {}",
                    output::text(&job["id"]),
                    output::text(&job["tenant"])
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub async fn submit(global: &GlobalArgs, args: SubmitArgs) -> anyhow::Result<()> {
    let (bytes, name) = if args.file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
        (bytes, "stdin".to_owned())
    } else {
        let bytes = std::fs::read(&args.file)
            .with_context(|| format!("cannot read {}", args.file.display()))?;
        (bytes, args.file.display().to_string())
    };
    let is_json = args.file.extension().is_some_and(|ext| ext == "json")
        || (args.file.as_os_str() == "-" && bytes.trim_ascii_start().starts_with(b"{"));
    let content_type = if is_json {
        "application/json"
    } else {
        "application/yaml"
    };
    let key = args
        .idempotency_key
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let client = Client::new(global).await?;
    let response = client
        .send(
            Method::POST,
            "/api/v1/jobs",
            Some((content_type, bytes)),
            &[("idempotency-key", &key)],
        )
        .await
        .with_context(|| format!("submitting {name} failed"))?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let job = &response["job"];
            out!(
                "job {} submitted: {} ({})",
                output::text(&job["name"]),
                output::text(&job["id"]),
                output::text(&job["state"])
            );
        }
    }
    Ok(())
}

pub async fn jobs(global: &GlobalArgs, args: JobsArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let mut params = vec![("limit".to_owned(), args.limit.to_string())];
    if let Some(state) = args.state {
        params.push(("state".to_owned(), state));
    }
    for label in args.labels {
        params.push(("label".to_owned(), label));
    }
    if let Some(tenant) = args.tenant {
        params.push(("tenant".to_owned(), tenant));
    }
    let mut jobs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut page_params = params.clone();
        if let Some(cursor) = &cursor {
            page_params.push(("cursor".to_owned(), cursor.clone()));
        }
        let query = serde_urlencoded::to_string(&page_params)?;
        let page = client.get(&format!("/api/v1/jobs?{query}")).await?;
        jobs.extend(page["jobs"].as_array().cloned().unwrap_or_default());
        cursor = page["meta"]["next_cursor"].as_str().map(str::to_owned);
        if !args.all || cursor.is_none() {
            if global.output == Format::Table && cursor.is_some() {
                let total = &page["meta"]["total"];
                let or_more = if page["meta"]["total_exact"] == false {
                    " or more"
                } else {
                    ""
                };
                eprintln!(
                    "({} of {total}{or_more} jobs shown: use --all or --limit)",
                    jobs.len()
                );
            }
            break;
        }
    }
    match global.output {
        Format::Json => output::json(&json!({ "jobs": jobs })),
        Format::Table => {
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|job| {
                    vec![
                        output::text(&job["id"]),
                        output::text(&job["name"]),
                        output::text(&job["tenant"]),
                        output::text(&job["type"]),
                        output::text(&job["state"]),
                        output::text(&job["max_gpus"]),
                        output::labels(&job["labels"]),
                        output::age(&job["created_at"]),
                    ]
                })
                .collect();
            output::table(
                &[
                    "ID", "NAME", "TENANT", "TYPE", "STATE", "GPUS", "LABELS", "AGE",
                ],
                &rows,
            );
        }
    }
    Ok(())
}

pub async fn job(global: &GlobalArgs, args: JobIdArg) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let response = client.get(&format!("/api/v1/jobs/{id}")).await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let job = &response["job"];
            for (key, field) in [
                ("ID", "id"),
                ("Name", "name"),
                ("Tenant", "tenant"),
                ("Type", "type"),
                ("State", "state"),
                ("Reason", "reason"),
                ("Message", "message"),
                ("Priority", "priority"),
                ("Max GPUs", "max_gpus"),
                ("Created", "created_at"),
                ("Updated", "updated_at"),
            ] {
                out!("{:<10} {}", format!("{key}:"), output::text(&job[field]));
            }
            out!("{:<10} {}", "Labels:", output::labels(&job["labels"]));
            let queue = &job["queue"];
            if queue.is_object() {
                out!(
                    "{:<10} {} in the queue, waiting because {}; starts {}",
                    "Queue:",
                    match queue["position"].as_u64() {
                        Some(n) => format!("#{n}"),
                        None => "not yet placed".to_owned(),
                    },
                    output::text(&queue["reason"]).replace('_', " "),
                    output::predicted_start(queue)
                );
            }
            if job["model"].is_object() {
                for (key, line) in model_lines(&job["model"]) {
                    out!("{:<10} {line}", format!("{key}:"));
                }
            }
            out!("Spec:");
            let spec =
                serde_yaml::to_string(&job["spec"]).unwrap_or_else(|_| job["spec"].to_string());
            for line in spec.lines() {
                out!("  {line}");
            }
        }
    }
    Ok(())
}

/// The fitted models of `drover job`'s table: progress and remaining time, speed per shape, loss curve.
fn model_lines(model: &Value) -> Vec<(&'static str, String)> {
    let shape = |s: &Value| format!("{} PS × {} workers", s["ps"], s["workers"]);
    let mut lines = Vec::new();
    let mut progress = format!("{} done", model["steps_done"]);
    let remaining = &model["remaining"];
    if remaining.is_object() {
        let basis = match remaining["basis"].as_str() {
            Some("convergence") => "until the loss curve converges",
            _ => "to max_steps",
        };
        progress.push_str(&format!("; {} left {basis}", remaining["steps"]));
        if let Some(seconds) = remaining["seconds"].as_f64() {
            progress.push_str(&format!(
                ", about {} at {}",
                humantime::format_duration(std::time::Duration::from_secs(seconds.round() as u64)),
                shape(remaining)
            ));
        }
    }
    lines.push(("Steps", progress));
    let speed = &model["speed"];
    let measured: Vec<String> = speed["shapes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{} {:.1} ms/step ({} reports; model {:.1})",
                shape(s),
                s["mean_step_ms"].as_f64().unwrap_or(f64::NAN),
                s["samples"],
                s["predicted_step_ms"].as_f64().unwrap_or(f64::NAN)
            )
        })
        .collect();
    if !measured.is_empty() {
        let fit = if speed["fitted"] == true {
            "fitted"
        } else {
            "a prior scaled to these until 3 shapes are measured"
        };
        lines.push(("Speed", format!("{} [{fit}]", measured.join("; "))));
    }
    if let Some(beta) = model["convergence"]["beta"].as_array() {
        let b = |i: usize| beta.get(i).and_then(Value::as_f64).unwrap_or(f64::NAN);
        lines.push((
            "Loss",
            format!(
                "1/({:.4}·k + {:.4}) + {:.4} fitted to {} samples",
                b(0),
                b(1),
                b(2),
                model["convergence"]["samples"]
            ),
        ));
    }
    lines
}

pub async fn cancel(global: &GlobalArgs, args: JobIdArg) -> anyhow::Result<()> {
    change_state(global, args, "cancel", "cancelled").await
}

pub async fn pause(global: &GlobalArgs, args: JobIdArg) -> anyhow::Result<()> {
    change_state(
        global,
        args,
        "pause",
        "paused: its tasks checkpoint and stop",
    )
    .await
}

pub async fn resume(global: &GlobalArgs, args: JobIdArg) -> anyhow::Result<()> {
    change_state(
        global,
        args,
        "resume",
        "queued again; it carries on from its last checkpoint",
    )
    .await
}

/// Posts `verb` to the job and says what became of it.
async fn change_state(
    global: &GlobalArgs,
    args: JobIdArg,
    verb: &str,
    outcome: &str,
) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let response = client
        .post_json(&format!("/api/v1/jobs/{id}/{verb}"), &json!({}))
        .await?;
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => out!("job {} {outcome}", output::text(&response["job"]["name"])),
    }
    Ok(())
}

pub async fn events(global: &GlobalArgs, args: JobIdArg) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let id = job_segment(&client, &args.id).await?;
    let events = client
        .all_pages(&format!("/api/v1/jobs/{id}/events?limit=500"), "events")
        .await?;
    match global.output {
        Format::Json => output::json(&json!({ "events": events })),
        Format::Table => {
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    vec![
                        output::text(&e["created_at"]),
                        output::text(&e["from"]),
                        output::text(&e["to"]),
                        output::text(&e["reason"]),
                        output::text(&e["message"]),
                    ]
                })
                .collect();
            output::table(&["TIME", "FROM", "TO", "REASON", "MESSAGE"], &rows);
        }
    }
    Ok(())
}
