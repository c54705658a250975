//! Job-submission load generator, run as its own process against a running `drover server`.
//!
//! `drover-loadgen run` keeps `--clients` submissions in flight for `--duration` and prints the rate and
//! latency percentiles. `drover-loadgen pgbench-script` prints a pgbench script that executes the SQL
//! one submission would execute on its own (the token lookup, then the job and its event in one
//! transaction), so `scripts/bench-submit` can compare Drover with the database alone. (The server
//! stores concurrent submissions in shared transactions and remembers tokens, so under load it runs
//! less than that per submission.) `drover-loadgen durability` is the client of
//! `scripts/durability-run` (the [`durability`] module): every submission retried until acknowledged
//! while the server is killed and its database restarted, each acknowledgement written down for the
//! script to check.

mod durability;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(about = "Drover job-submission load generator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit jobs as fast as the server takes them.
    Run {
        #[arg(long, env = "DROVER_SERVER")]
        server: String,
        #[arg(long, env = "DROVER_TOKEN", hide_env_values = true)]
        token: String,
        /// Concurrent clients (requests in flight).
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Measured time.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Unmeasured time before it.
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        warmup: Duration,
        /// Prefix of job names (unique per run).
        #[arg(long, default_value = "load")]
        prefix: String,
        /// A PEM file of the authority that issued an `https://` server's certificate.
        #[arg(long)]
        ca_cert: Option<std::path::PathBuf>,
    },
    /// Submit `--total` jobs, each retried until acknowledged, and write the acknowledgements to
    /// `--out` (the client of scripts/durability-run).
    Durability {
        #[arg(long, env = "DROVER_SERVER")]
        server: String,
        #[arg(long, env = "DROVER_TOKEN", hide_env_values = true)]
        token: String,
        /// Concurrent clients; the odd-numbered ones send no idempotency key.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Logical submissions in all.
        #[arg(long, default_value_t = 2000)]
        total: usize,
        /// One line per acknowledged submission: `i<TAB>job id<TAB>status`.
        #[arg(long)]
        out: std::path::PathBuf,
        /// The run's id, in idempotency keys, names and labels (lowercase letters and digits; default
        /// from the clock).
        #[arg(long)]
        run: Option<String>,
    },
    /// Print a pgbench script running the SQL of one submission.
    PgbenchScript {
        /// The submitting user's tenant id.
        #[arg(long)]
        tenant_id: String,
        /// The submitting user's id.
        #[arg(long)]
        user_id: String,
        /// SHA-256 of the bearer token, hex.
        #[arg(long)]
        token_hash: String,
        /// The stored document of one job the load generator submitted (JSON), as the server wrote it.
        #[arg(long)]
        document_file: std::path::PathBuf,
    },
}

/// The job every client submits, with its name filled in.
fn job_body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"drover.dev/v1","kind":"DroverJob","metadata":{{"name":"{name}","labels":{{"bench":"load"}}}},"spec":{{"type":"command","command":{{"argv":["sleep","1"]}},"resources":{{"workers":{{"min":1,"max":1}},"gpus_per_worker":0,"cpus_per_worker":1}}}}}}"#
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run {
            server,
            token,
            clients,
            duration,
            warmup,
            prefix,
            ca_cert,
        } => {
            let mut http = reqwest::Client::builder().pool_max_idle_per_host(clients);
            if let Some(path) = ca_cert {
                let pem = std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
            }
            run(
                http.build()?,
                &server,
                &token,
                clients,
                duration,
                warmup,
                &prefix,
            )
            .await
        }
        Command::Durability {
            server,
            token,
            clients,
            total,
            out,
            run,
        } => {
            let run = run.unwrap_or_else(|| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                format!("{:x}", now.as_millis())
            });
            durability::run(durability::Settings {
                server,
                token,
                clients,
                total,
                out,
                run,
            })
            .await
        }
        Command::PgbenchScript {
            tenant_id,
            user_id,
            token_hash,
            document_file,
        } => {
            let document = std::fs::read_to_string(&document_file)
                .with_context(|| format!("cannot read {}", document_file.display()))?;
            print!(
                "{}",
                pgbench_script(&tenant_id, &user_id, &token_hash, document.trim())?
            );
            Ok(())
        }
    }
}

async fn run(
    http: reqwest::Client,
    server: &str,
    token: &str,
    clients: usize,
    duration: Duration,
    warmup: Duration,
    prefix: &str,
) -> anyhow::Result<()> {
    let url = format!("{}/api/v1/jobs", server.trim_end_matches('/'));
    let authorization = format!("Bearer {token}");
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let (http, url, authorization) = (http.clone(), url.clone(), authorization.clone());
        let (measuring, stop, errors) = (measuring.clone(), stop.clone(), errors.clone());
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut latencies_us: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = job_body(&format!("{prefix}-{client}-{n}"));
                let started = Instant::now();
                let response = http
                    .post(&url)
                    .header("authorization", &authorization)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let ok = matches!(&response, Ok(r) if r.status() == reqwest::StatusCode::CREATED);
                if let Ok(response) = response {
                    let _ = response.bytes().await;
                }
                let elapsed = started.elapsed();
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        latencies_us.push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latencies_us
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await?);
    }
    let errors = errors.load(Ordering::Relaxed);
    if latencies.is_empty() {
        bail!("no submission succeeded ({errors} failed)");
    }
    latencies.sort_unstable();
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        f64::from(latencies[index]) / 1000.0
    };
    let rate = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "drover: {} submissions in {:.1}s with {clients} clients: {rate:.0}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {errors} errors",
        latencies.len(),
        elapsed.as_secs_f64(),
        percentile(0.50),
        percentile(0.99),
        percentile(1.0),
    );
    println!(
        "RATE={rate:.1} P50_MS={:.2} P99_MS={:.2}",
        percentile(0.50),
        percentile(0.99)
    );
    Ok(())
}

fn sql_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Substitutes `$n` placeholders (highest first, so `$1` does not eat `$16`).
fn substitute(sql: &str, values: &[String]) -> String {
    let mut out = sql.to_owned();
    for (i, value) in values.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), value);
    }
    out
}

fn pgbench_script(
    tenant_id: &str,
    user_id: &str,
    token_hash: &str,
    document: &str,
) -> anyhow::Result<String> {
    if token_hash.len() != 64 || !token_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("--token-hash must be 64 hex digits");
    }
    let find_token = substitute(
        drover_store::FIND_TOKEN,
        &[format!("decode('{token_hash}', 'hex')")],
    );
    // The server mints a time-ordered id in-process; pgbench has no such function, so the script asks
    // the database for one (a table-free SELECT, the only statement the server does not run).
    let mint_id = "SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
                   || substr(md5(random()::text), 1, 20))::uuid AS job_id \\gset";
    let now = "clock_timestamp()".to_owned();
    let insert_job = substitute(
        drover_store::INSERT_JOB,
        &[
            "CAST(:job_id AS uuid)".to_owned(),
            format!("CAST('{tenant_id}' AS uuid)"),
            "'p' || :job_id".to_owned(),
            "'command'".to_owned(),
            "'queued'".to_owned(),
            "'submitted'".to_owned(),
            "'submitted'".to_owned(),
            "0".to_owned(),
            "0".to_owned(),
            format!("CAST({} AS jsonb)", sql_literal(r#"{"bench":"load"}"#)),
            format!("CAST({} AS jsonb)", sql_literal(document)),
            "1".to_owned(),
            format!("CAST('{user_id}' AS uuid)"),
            "NULL".to_owned(),
            "NULL".to_owned(),
            now.clone(),
        ],
    );
    let insert_event = substitute(
        drover_store::INSERT_EVENT,
        &[
            "CAST(:job_id AS uuid)".to_owned(),
            "NULL".to_owned(),
            "'queued'".to_owned(),
            "'submitted'".to_owned(),
            "'submitted'".to_owned(),
            format!("CAST('{user_id}' AS uuid)"),
            now,
        ],
    );
    Ok(format!(
        "{mint_id}\n{find_token};\nBEGIN;\n{insert_job};\n{insert_event};\nCOMMIT;\n"
    ))
}
