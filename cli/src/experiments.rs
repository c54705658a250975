//! `drover experiment …`: hyper-parameter searches. An experiment is named by its id or, within the
//! caller's tenant, by its name.

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum ExperimentCommand {
    /// Submit a DroverExperiment (YAML or JSON; `-` reads standard input).
    Submit { file: PathBuf },
    /// The tenant's experiments, newest first.
    List,
    /// One experiment: state, best trial, and every trial.
    Get { experiment: String },
    /// An experiment's trials: state, metric, hyper-parameters.
    Trials { experiment: String },
    /// The best trial's hyper-parameters, and the command that downloads its model.
    Best { experiment: String },
    /// What the experiment did: trials started, promoted, stopped; budgets.
    Events { experiment: String },
    /// Stop starting trials and pause the running ones.
    Pause { experiment: String },
    /// Resume a paused experiment.
    Resume { experiment: String },
    /// Cancel the experiment and its running trials.
    Cancel { experiment: String },
}

pub async fn experiment(global: &GlobalArgs, command: ExperimentCommand) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    match command {
        ExperimentCommand::Submit { file } => submit(global, &client, &file).await,
        ExperimentCommand::List => list(global, &client).await,
        ExperimentCommand::Get { experiment } => {
            let id = resolve(&client, &experiment).await?;
            let reply = client.get(&format!("/api/v1/experiments/{id}")).await?;
            show(global, &reply);
            Ok(())
        }
        ExperimentCommand::Trials { experiment } => {
            let id = resolve(&client, &experiment).await?;
            let reply = client
                .get(&format!("/api/v1/experiments/{id}/trials"))
                .await?;
            match global.output {
                Format::Json => output::json(&reply),
                Format::Table => {
                    trials_table(reply["trials"].as_array().map_or(&[][..], Vec::as_slice))
                }
            }
            Ok(())
        }
        ExperimentCommand::Best { experiment } => best(global, &client, &experiment).await,
        ExperimentCommand::Events { experiment } => {
            let id = resolve(&client, &experiment).await?;
            let reply = client
                .get(&format!("/api/v1/experiments/{id}/events?limit=500"))
                .await?;
            match global.output {
                Format::Json => output::json(&reply),
                Format::Table => {
                    for event in reply["events"].as_array().into_iter().flatten() {
                        out!(
                            "{}  {}",
                            output::text(&event["created_at"]),
                            output::text(&event["message"])
                        );
                    }
                }
            }
            Ok(())
        }
        ExperimentCommand::Pause { experiment } => act(global, &client, &experiment, "pause").await,
        ExperimentCommand::Resume { experiment } => {
            act(global, &client, &experiment, "resume").await
        }
        ExperimentCommand::Cancel { experiment } => {
            act(global, &client, &experiment, "cancel").await
        }
    }
}

/// The experiment's id: the argument if it is one, else the id of the tenant's experiment of that name.
async fn resolve(client: &Client, experiment: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(experiment).is_ok() {
        return Ok(experiment.to_owned());
    }
    let reply = client.get("/api/v1/experiments?limit=500").await?;
    reply["experiments"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == experiment)
        .and_then(|e| e["id"].as_str().map(str::to_owned))
        .with_context(|| {
            format!("no experiment `{experiment}` (`drover experiment list` shows them)")
        })
}

async fn submit(global: &GlobalArgs, client: &Client, file: &PathBuf) -> anyhow::Result<()> {
    let bytes = if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .context("cannot read standard input")?;
        bytes
    } else {
        std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let json = file.extension().is_some_and(|ext| ext == "json")
        || (file.as_os_str() == "-" && bytes.trim_ascii_start().starts_with(b"{"));
    let content_type = if json {
        "application/json"
    } else {
        "application/yaml"
    };
    let reply = client
        .send(
            Method::POST,
            "/api/v1/experiments",
            Some((content_type, bytes)),
            &[],
        )
        .await
        .with_context(|| format!("submitting {} failed", file.display()))?;
    match global.output {
        Format::Json => output::json(&reply),
        Format::Table => {
            let e = &reply["experiment"];
            out!(
                "experiment {} ({}) submitted: {} searcher, {} {}; follow it with `drover experiment get {}`",
                output::text(&e["name"]),
                output::text(&e["id"]),
                output::text(&e["searcher"]),
                output::text(&e["metric"]["goal"]),
                output::text(&e["metric"]["name"]),
                output::text(&e["name"]),
            );
        }
    }
    Ok(())
}

async fn list(global: &GlobalArgs, client: &Client) -> anyhow::Result<()> {
    let reply = client.get("/api/v1/experiments?limit=500").await?;
    match global.output {
        Format::Json => output::json(&reply),
        Format::Table => {
            let rows: Vec<Vec<String>> = reply["experiments"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    vec![
                        output::text(&e["name"]),
                        output::text(&e["state"]),
                        output::text(&e["searcher"]),
                        format!(
                            "{} ({})",
                            output::text(&e["metric"]["name"]),
                            output::text(&e["metric"]["goal"])
                        ),
                        output::text(&e["best_value"]),
                        output::text(&e["best_trial"]),
                        output::age(&e["created_at"]),
                        output::text(&e["id"]),
                    ]
                })
                .collect();
            output::table(
                &[
                    "NAME", "STATE", "SEARCHER", "METRIC", "BEST", "TRIAL", "AGE", "ID",
                ],
                &rows,
            );
        }
    }
    Ok(())
}

fn show(global: &GlobalArgs, reply: &Value) {
    if global.output == Format::Json {
        output::json(reply);
        return;
    }
    let e = &reply["experiment"];
    out!(
        "Name:      {} ({})",
        output::text(&e["name"]),
        output::text(&e["id"])
    );
    out!("Tenant:    {}", output::text(&e["tenant"]));
    out!(
        "State:     {} ({})",
        output::text(&e["state"]),
        output::text(&e["message"])
    );
    out!("Searcher:  {}", output::text(&e["searcher"]));
    out!(
        "Metric:    {} ({})",
        output::text(&e["metric"]["name"]),
        output::text(&e["metric"]["goal"])
    );
    out!(
        "Best:      {} (trial {})",
        output::text(&e["best_value"]),
        output::text(&e["best_trial"])
    );
    out!("Trials:    {}", output::text(&e["num_trials"]));
    if let Some(trials) = e["trials"].as_array().filter(|t| !t.is_empty()) {
        out!("");
        trials_table(trials);
    }
}

fn params_text(params: &Value) -> String {
    params
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(k, v)| format!("{k}={}", output::text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn trials_table(trials: &[Value]) {
    let rows: Vec<Vec<String>> = trials
        .iter()
        .map(|t| {
            let jobs = t["jobs"].as_array().map_or(0, Vec::len);
            // While it runs: the searcher's outlook, which the scheduler acts on.
            let promise = match (t["promise"].as_f64(), t["doomed"].as_bool()) {
                (Some(_), Some(true)) => "doomed".to_owned(),
                (Some(p), _) => format!("{p:.2}"),
                _ => "-".to_owned(),
            };
            vec![
                output::text(&t["trial"]),
                output::text(&t["state"]),
                output::text(&t["last_value"]),
                output::text(&t["last_step"]),
                promise,
                jobs.to_string(),
                params_text(&t["params"]),
            ]
        })
        .collect();
    output::table(
        &[
            "TRIAL",
            "STATE",
            "LAST",
            "STEP",
            "PROMISE",
            "JOBS",
            "HYPER-PARAMETERS",
        ],
        &rows,
    );
}

async fn best(global: &GlobalArgs, client: &Client, experiment: &str) -> anyhow::Result<()> {
    let id = resolve(client, experiment).await?;
    let reply = client.get(&format!("/api/v1/experiments/{id}")).await?;
    let e = &reply["experiment"];
    let Some(best) = e["best_trial"].as_u64() else {
        bail!(
            "experiment {} has no trial that reported {} yet",
            output::text(&e["name"]),
            output::text(&e["metric"]["name"])
        );
    };
    let trial = e["trials"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["trial"].as_u64() == Some(best))
        .cloned()
        .unwrap_or(Value::Null);
    // The trial's latest job holds its latest checkpoint (later segments resume the earlier ones).
    let job = trial["jobs"]
        .as_array()
        .and_then(|jobs| jobs.last())
        .and_then(|j| j["job_id"].as_str())
        .map(str::to_owned);
    match global.output {
        Format::Json => output::json(&serde_json::json!({
            "trial": best,
            "value": e["best_value"],
            "params": trial["params"],
            "job_id": job,
        })),
        Format::Table => {
            out!(
                "best trial: {best} ({} {})",
                output::text(&e["metric"]["name"]),
                output::text(&e["best_value"])
            );
            for (k, v) in trial["params"].as_object().into_iter().flatten() {
                out!("  {k}: {}", output::text(v));
            }
            if let Some(job) = job {
                out!("download its model: drover download {}", segment(&job));
            }
        }
    }
    Ok(())
}

async fn act(
    global: &GlobalArgs,
    client: &Client,
    experiment: &str,
    action: &str,
) -> anyhow::Result<()> {
    let id = resolve(client, experiment).await?;
    let reply = client
        .post_json(&format!("/api/v1/experiments/{id}/{action}"), &Value::Null)
        .await?;
    match global.output {
        Format::Json => output::json(&reply),
        Format::Table => {
            let e = &reply["experiment"];
            out!(
                "experiment {}: {} ({})",
                output::text(&e["name"]),
                output::text(&e["state"]),
                output::text(&e["message"])
            );
        }
    }
    Ok(())
}
