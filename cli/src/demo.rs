//! `drover dev --demo`: submits the example jobs and follows them to the end.

use crate::global::GlobalArgs;
use crate::output::out;
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Submits every example job (idempotently, so a restarted demo does not duplicate them) and lists jobs.
pub async fn demo(url: &str, token: &str, examples: &Path) -> anyhow::Result<()> {
    let global = GlobalArgs {
        server: Some(url.to_owned()),
        token: Some(token.to_owned()),
        output: crate::output::Format::Table,
        data_dir: PathBuf::from(".drover"),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples)
        .with_context(|| format!("cannot read {}", examples.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "json")
        })
        .collect();
    files.sort();
    out!();
    for file in files {
        let key = format!(
            "demo-{}",
            file.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let args = crate::commands::SubmitArgs {
            file: file.clone(),
            idempotency_key: Some(key),
        };
        if let Err(err) = crate::commands::submit(&global, args).await {
            eprintln!("demo: {err:#}");
        }
    }
    // Hyper-parameter searches: `examples/experiments/`. One already there (a restarted demo) stays.
    let experiments = examples.join("experiments");
    let mut searches: Vec<PathBuf> = std::fs::read_dir(&experiments)
        .map(|dir| {
            dir.filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    searches.sort();
    let client = crate::client::Client::new(&global).await?;
    for file in searches {
        let bytes =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        match client
            .send(
                reqwest::Method::POST,
                "/api/v1/experiments",
                Some(("application/yaml", bytes)),
                &[],
            )
            .await
        {
            Ok(reply) => out!(
                "experiment {} submitted ({} searcher): `drover experiment get {}` follows it",
                crate::output::text(&reply["experiment"]["name"]),
                crate::output::text(&reply["experiment"]["searcher"]),
                crate::output::text(&reply["experiment"]["name"]),
            ),
            Err(err) if format!("{err:#}").contains("already has an experiment") => {
                out!(
                    "experiment from {} already submitted by an earlier run",
                    file.display()
                );
            }
            Err(err) => eprintln!("demo: {}: {err:#}", file.display()),
        }
    }
    out!();
    crate::commands::jobs(
        &global,
        crate::commands::JobsArgs {
            state: None,
            labels: Vec::new(),
            tenant: None,
            limit: 50,
            all: false,
        },
    )
    .await?;
    out!();
    out!("Following the jobs (Ctrl-C stops the server):");
    watch(&global).await
}

/// Prints every job's state changes as they happen, and a finished job's last metrics; an
/// experiment's trials show as the experiment's events instead, and its best trial when it ends.
async fn watch(global: &GlobalArgs) -> anyhow::Result<()> {
    use crate::output::text;
    let client = crate::client::Client::new(global).await?;
    let mut seen: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    loop {
        let experiments = client.get("/api/v1/experiments?limit=20").await?;
        for experiment in experiments["experiments"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            let id = text(&experiment["id"]);
            let name = text(&experiment["name"]);
            let after = seen.get(&id).copied().unwrap_or(0);
            let events = client
                .get(&format!(
                    "/api/v1/experiments/{id}/events?cursor={after}&limit=100"
                ))
                .await?;
            for event in events["events"].as_array().map_or(&[][..], Vec::as_slice) {
                seen.insert(id.clone(), event["id"].as_i64().unwrap_or(after));
                out!("  {name:<16} {}", text(&event["message"]));
                if text(&event["message"]).starts_with("finished") {
                    out!("  {name:<16} the winner: drover experiment best {name}");
                }
            }
        }
        let jobs = client.get("/api/v1/jobs?limit=100").await?;
        for job in jobs["jobs"].as_array().map_or(&[][..], Vec::as_slice) {
            if !job["labels"]["drover.dev/experiment"].is_null() {
                continue;
            }
            let id = text(&job["id"]);
            let name = text(&job["name"]);
            let after = seen.get(&id).copied().unwrap_or(0);
            let events = client
                .get(&format!(
                    "/api/v1/jobs/{id}/events?cursor={after}&limit=100"
                ))
                .await?;
            for event in events["events"].as_array().map_or(&[][..], Vec::as_slice) {
                seen.insert(id.clone(), event["id"].as_i64().unwrap_or(after));
                if event["reason"] == "submitted" {
                    continue;
                }
                out!(
                    "  {name:<16} {} -> {:<10} {}",
                    text(&event["from"]),
                    text(&event["to"]),
                    text(&event["message"])
                );
                if event["to"] == "succeeded" {
                    let metrics = client
                        .get(&format!("/api/v1/jobs/{id}/metrics?limit=5000"))
                        .await?;
                    let mut last = std::collections::BTreeMap::new();
                    for m in metrics["metrics"].as_array().map_or(&[][..], Vec::as_slice) {
                        last.insert(text(&m["name"]), m["value"].as_f64().unwrap_or(0.0));
                    }
                    if !last.is_empty() {
                        let shown: Vec<String> =
                            last.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
                        out!("  {name:<16} final metrics: {}", shown.join(" "));
                        out!("  {name:<16} checkpoint: drover download {id}");
                    }
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}
