//! `drover queue` (every waiting job's place and predicted start) and `drover usage` (GPU-hours
//! allocated, used and lost by cause, and each tenant's fair share).

use crate::client::Client;
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use serde_json::Value;

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Cluster administrators: only this tenant's jobs.
    #[arg(long)]
    tenant: Option<String>,
    /// Skip this many jobs of the queue (the next page).
    #[arg(long, default_value_t = 0)]
    offset: u32,
    /// At most this many jobs.
    #[arg(long, default_value_t = 500)]
    limit: u32,
}

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// Window start: a date (2026-11-01, UTC) or an RFC 3339 time; default seven days ago.
    #[arg(long)]
    from: Option<String>,
    /// Window end (exclusive); default now.
    #[arg(long)]
    to: Option<String>,
    /// Group by tenant, user or job.
    #[arg(long, default_value = "tenant", value_parser = ["tenant", "user", "job"])]
    by: String,
    /// One row per day, per week, or for the whole window.
    #[arg(long, default_value = "total", value_parser = ["day", "week", "total"])]
    period: String,
    /// Cluster administrators: only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Print CSV (every lost cause in its own column) instead of a table.
    #[arg(long)]
    csv: bool,
}

pub async fn queue(global: &GlobalArgs, args: QueueArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let mut params = vec![
        ("offset".to_owned(), args.offset.to_string()),
        ("limit".to_owned(), args.limit.to_string()),
    ];
    if let Some(tenant) = args.tenant {
        params.push(("tenant".to_owned(), tenant));
    }
    let query = serde_urlencoded::to_string(&params)?;
    let response = client.get(&format!("/api/v1/queue?{query}")).await?;
    if global.output == Format::Json {
        output::json(&response);
        return Ok(());
    }
    let jobs = response["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        out!("No job waits.");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            vec![
                output::text(&job["position"]),
                output::text(&job["id"]),
                output::text(&job["name"]),
                output::text(&job["tenant"]),
                output::text(&job["max_gpus"]),
                output::text(&job["explanation"]),
                output::predicted_start(job),
                output::until(&job["predicted_finish"]),
                output::age(&job["submitted_at"]),
            ]
        })
        .collect();
    output::table(
        &[
            "#",
            "ID",
            "NAME",
            "TENANT",
            "GPUS",
            "WAITING BECAUSE",
            "START (P10 – P90)",
            "FINISH",
            "AGE",
        ],
        &rows,
    );
    let total = response["total"].as_u64().unwrap_or(0);
    let shown = u64::from(args.offset) + jobs.len() as u64;
    if u64::from(args.offset) > 0 || shown < total {
        eprintln!(
            "(jobs {} to {shown} of {total}{}; --offset {shown} for the next)",
            args.offset + 1,
            if response["complete"] == false {
                ", the oldest 5,000 of a longer queue"
            } else {
                ""
            }
        );
    }
    match response["policy"].as_str() {
        Some(policy) => eprintln!(
            "(predicted by replaying the {policy} policy ahead from the cluster as it was {} ago)",
            output::age(&response["forecast_at"])
        ),
        None => eprintln!("(no forecast yet: the scheduler has not finished a round)"),
    }
    Ok(())
}

fn hours(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |h| format!("{h:.2}"))
}

pub async fn usage(global: &GlobalArgs, args: UsageArgs) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let mut params = vec![
        ("by".to_owned(), args.by.clone()),
        ("period".to_owned(), args.period.clone()),
    ];
    for (name, value) in [
        ("from", args.from),
        ("to", args.to),
        ("tenant", args.tenant),
    ] {
        if let Some(value) = value {
            params.push((name.to_owned(), value));
        }
    }
    if args.csv {
        params.push(("format".to_owned(), "csv".to_owned()));
        let query = serde_urlencoded::to_string(&params)?;
        let response = client
            .get_streaming(&format!("/api/v1/usage?{query}"))
            .await?;
        let text = response.text().await?;
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
        return Ok(());
    }
    let query = serde_urlencoded::to_string(&params)?;
    let response = client.get(&format!("/api/v1/usage?{query}")).await?;
    if global.output == Format::Json {
        output::json(&response);
        return Ok(());
    }
    let lost = |row: &Value| {
        let causes: Vec<String> = row["lost_by_cause"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, h)| h.as_f64().unwrap_or(0.0) >= 0.005)
            .map(|(cause, h)| format!("{cause} {}", hours(h)))
            .collect();
        if causes.is_empty() {
            "-".to_owned()
        } else {
            causes.join(", ")
        }
    };
    let mut headers = vec!["PERIOD", "TENANT"];
    if args.by != "tenant" {
        headers.push("USER");
    }
    if args.by == "job" {
        headers.push("JOB");
    }
    headers.extend(["ALLOCATED", "USED", "LOST", "LOST BY CAUSE (GPU-H)"]);
    let rows: Vec<Vec<String>> = response["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| {
            let mut cells = vec![
                row["period_start"]
                    .as_str()
                    .map_or("-".to_owned(), |s| s.get(..10).unwrap_or(s).to_owned()),
                output::text(&row["tenant"]),
            ];
            if args.by != "tenant" {
                cells.push(output::text(&row["user"]));
            }
            if args.by == "job" {
                cells.push(output::text(&row["job"]));
            }
            cells.extend([
                hours(&row["allocated_gpu_hours"]),
                hours(&row["used_gpu_hours"]),
                hours(&row["lost_gpu_hours"]),
                lost(row),
            ]);
            cells
        })
        .collect();
    if rows.is_empty() {
        out!("No GPU was allocated in this window.");
    } else {
        output::table(&headers, &rows);
        let total = &response["total"];
        out!(
            "Total: {} GPU-hours allocated, {} used ({}), {} lost: {}",
            hours(&total["allocated_gpu_hours"]),
            hours(&total["used_gpu_hours"]),
            match (
                total["used_gpu_hours"].as_f64(),
                total["allocated_gpu_hours"].as_f64()
            ) {
                (Some(u), Some(a)) if a > 0.0 => format!("{:.1}% goodput", 100.0 * u / a),
                _ => "-".to_owned(),
            },
            hours(&total["lost_gpu_hours"]),
            lost(total)
        );
    }
    let now: Vec<&Value> = response["fair_share"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["period_start"].is_null())
        .collect();
    if !now.is_empty() {
        out!();
        out!("Fair share now:");
        let rows: Vec<Vec<String>> = now
            .iter()
            .map(|r| {
                vec![
                    output::text(&r["tenant"]),
                    output::text(&r["guaranteed_gpus"]),
                    format!("{:.0}", r["held_gpus"].as_f64().unwrap_or(0.0)),
                    format!("{:.0}", r["borrowed_gpus"].as_f64().unwrap_or(0.0)),
                    format!("{:.1}", r["lent_gpus"].as_f64().unwrap_or(0.0)),
                ]
            })
            .collect();
        output::table(&["TENANT", "GUARANTEED", "HELD", "BORROWED", "LENT"], &rows);
    }
    if response["truncated"] == true {
        eprintln!("(more allocations overlap this window than one answer reads: narrow it)");
    }
    Ok(())
}
