//! `drover dev --demo`: submits the example jobs and follows them to the end.

use crate::GlobalArgs;
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

/// Prints every job's state changes as they happen, and a finished job's last metrics.
async fn watch(global: &GlobalArgs) -> anyhow::Result<()> {
    use crate::output::text;
    let client = crate::client::Client::new(global)?;
    let mut seen: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    loop {
        let jobs = client.get("/api/v1/jobs?limit=100").await?;
        for job in jobs["jobs"].as_array().map_or(&[][..], Vec::as_slice) {
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
