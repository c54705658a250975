//! The server under test: a `drover server` process of its own on a database made for the run in the
//! given Postgres (dropped afterwards), and what is read of it from outside: its CPU time and
//! resident memory from `/proc`, its round times from `/metrics`, and its database's transactions
//! and written rows from `pg_stat_database`.

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::path::Path;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

pub struct Server {
    child: tokio::process::Child,
    pid: u32,
    pub url: String,
    pub gateway: String,
    pub admin_token: String,
    pub enrollment_token: String,
    /// The Postgres server's own database, where the run's database is made and watched from.
    admin: PgPool,
    pub database: String,
    /// Postgres's autovacuum is off: the run vacuums and analyzes its database itself, every
    /// [`VACUUM_EVERY`], as autovacuum would (this task stops with the server).
    vacuuming: Option<tokio::task::JoinHandle<()>>,
    http: reqwest::Client,
    _data_dir: tempfile::TempDir,
}

/// How often the run vacuums and analyzes its database where autovacuum is off. A database with
/// autovacuum off grows tables of dead rows (every heartbeat or task report leaves one) and has no
/// statistics for the planner: not what a cluster's Postgres looks like. Autovacuum's own pace
/// depends on its settings (a pass over a busy table every minute or so by default).
pub const VACUUM_EVERY: Duration = Duration::from_secs(30);

/// Cumulative counters read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub rss_mib: f64,
    pub transactions: i64,
    pub rows_written: i64,
    /// The run's database, tables and indexes (`pg_database_size`).
    pub database_bytes: i64,
    /// The round-time histogram: (upper bound in seconds, rounds at or under it), and its count.
    pub round_buckets: Vec<(f64, u64)>,
    pub rounds: u64,
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

impl Server {
    /// Makes a database in the Postgres at `database_url` and starts `bin server` on it with
    /// `policy`; returns once both its listeners are up.
    /// The server's log goes to `log` (kept), or to a file removed with the run.
    pub async fn start(
        bin: &Path,
        database_url: &str,
        policy: &str,
        log: Option<&Path>,
        gateway_plaintext: bool,
    ) -> anyhow::Result<Server> {
        let options = PgConnectOptions::from_str(database_url)
            .with_context(|| "--database-url: not a Postgres URL")?;
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .with_context(|| "cannot connect to the Postgres of --database-url")?;
        let database = format!("drover_fleet_{}", random_hex(6));
        // The name is made here of hex digits: safe to write into the statement.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
            .execute(&admin)
            .await
            .with_context(|| format!("cannot create database {database}"))?;
        let mut url =
            reqwest::Url::parse(database_url).with_context(|| "--database-url: not a URL")?;
        url.set_path(&format!("/{database}"));
        let data_dir = tempfile::tempdir()?;
        let admin_token = format!("drv_fleet_{}", random_hex(16));
        let enrollment_token = format!("fleet-{}", random_hex(16));
        let log_path = log.map_or_else(|| data_dir.path().join("server.log"), Path::to_path_buf);
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot write {}", log_path.display()))?;
        let mut child = tokio::process::Command::new(bin)
            .args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--gateway-listen",
                "127.0.0.1:0",
                "--policy",
                policy,
                // One token submits every job, faster than a caller may and more than a tenant may
                // queue: the run measures the fleet, not those limits (what tasks report is limited
                // as on any server).
                "--rate-limit",
                "0",
                "--max-queued-jobs-per-tenant",
                "0",
            ])
            .args(gateway_plaintext.then_some("--gateway-plaintext"))
            .arg("--data-dir")
            .arg(data_dir.path().join("server"))
            .env("DROVER_DATABASE_URL", url.as_str())
            .env("DROVER_ADMIN_TOKEN", &admin_token)
            .env("DROVER_ENROLLMENT_TOKEN", &enrollment_token)
            // The server logs what DROVER_LOG asks for (a round's parts at
            // `drover_runtime::scheduling=debug`), warnings by default.
            .env(
                "DROVER_LOG",
                std::env::var("DROVER_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let pid = child.id().context("the server exited at once")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let (mut url_line, mut gateway_line) = (None, None);
        let started = tokio::time::timeout(Duration::from_secs(60), async {
            while url_line.is_none() || gateway_line.is_none() {
                let Some(line) = lines.next_line().await? else {
                    bail!("the server exited while starting");
                };
                if let Some(rest) = line.strip_prefix("drover server listening on ") {
                    url_line = Some(rest.trim().to_owned());
                } else if let Some(rest) = line.strip_prefix("executor gateway listening on ") {
                    // `ADDRESS (plaintext)`, `ADDRESS (mutual TLS; …)`
                    gateway_line = rest.split_whitespace().next().map(str::to_owned);
                }
            }
            Ok(())
        })
        .await;
        let log = log_path;
        match started {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                return Err(err.context(format!("see {}", log.display())));
            }
            Err(_) => bail!(
                "the server did not start within 60 s (see {})",
                log.display()
            ),
        }
        // What the server prints later is not read; keep its pipe from filling.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let autovacuum: String = sqlx::query_scalar("SHOW autovacuum")
            .fetch_one(&admin)
            .await
            .with_context(|| "cannot read the Postgres server's autovacuum setting")?;
        let vacuuming = (autovacuum == "off")
            .then(|| tokio::spawn(vacuum_every(url.to_string(), VACUUM_EVERY)));
        Ok(Server {
            child,
            pid,
            url: url_line.unwrap_or_default(),
            gateway: gateway_line.unwrap_or_default(),
            admin_token,
            enrollment_token,
            admin,
            database,
            vacuuming,
            http: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(5))
                .build()?,
            _data_dir: data_dir,
        })
    }

    /// The certificate authority the gateway's certificates are issued by (PEM).
    pub async fn gateway_authority(&self) -> anyhow::Result<String> {
        let reply: serde_json::Value = self
            .http
            .get(format!("{}/api/v1/gateway-authority", self.url))
            .bearer_auth(&self.admin_token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        reply["certificate"]
            .as_str()
            .map(str::to_owned)
            .context("the server named no gateway authority")
    }

    /// The server's counters now.
    pub async fn read(&self) -> anyhow::Result<Reading> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .context("the server process is gone")?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let hz = clock_ticks();
        let cpu_seconds = (ticks(11) + ticks(12)) / hz;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let (transactions, rows_written, database_bytes): (i64, i64, i64) = sqlx::query_as(
            "SELECT (xact_commit + xact_rollback)::bigint, \
             (tup_inserted + tup_updated + tup_deleted)::bigint, pg_database_size($1)::bigint \
             FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&self.database)
        .fetch_one(&self.admin)
        .await?;
        let metrics = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let (round_buckets, rounds) = round_histogram(&metrics);
        Ok(Reading {
            cpu_seconds,
            rss_mib: rss_kib / 1024.0,
            transactions,
            rows_written,
            database_bytes,
            round_buckets,
            rounds,
        })
    }

    /// Whether the run vacuums its database itself (the Postgres server's autovacuum is off).
    pub fn vacuums(&self) -> bool {
        self.vacuuming.is_some()
    }

    /// Stops the server and drops its database.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(vacuuming) = self.vacuuming.take() {
            vacuuming.abort();
        }
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.database
        )))
        .execute(&self.admin)
        .await
        .with_context(|| format!("cannot drop database {}", self.database))?;
        Ok(())
    }
}

/// Vacuums and analyzes the database at `url` every `every`, as autovacuum would, until aborted.
/// A failed pass is reported and the next one tried.
async fn vacuum_every(url: String, every: Duration) {
    let pool = match PgPoolOptions::new().max_connections(1).connect(&url).await {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("warning: cannot connect to vacuum the run's database: {err}");
            return;
        }
    };
    loop {
        tokio::time::sleep(every).await;
        if let Err(err) = sqlx::raw_sql("VACUUM (ANALYZE)").execute(&pool).await {
            eprintln!("warning: vacuuming the run's database failed: {err}");
        }
    }
}

fn clock_ticks() -> f64 {
    // Linux reports process times in USER_HZ, 100 on every architecture it runs on today.
    100.0
}

/// `drover_scheduling_round_seconds` from a Prometheus text page: its cumulative buckets and count.
fn round_histogram(page: &str) -> (Vec<(f64, u64)>, u64) {
    let mut buckets = Vec::new();
    let mut count = 0;
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("drover_scheduling_round_seconds_bucket{le=\"") {
            let Some((le, value)) = rest.split_once("\"}") else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            if let Ok(n) = value.trim().parse::<u64>() {
                buckets.push((le, n));
            }
        } else if let Some(value) = line.strip_prefix("drover_scheduling_round_seconds_count ") {
            count = value.trim().parse().unwrap_or(0);
        }
    }
    (buckets, count)
}

/// The `q` quantile of the rounds between two readings, interpolated within its bucket (seconds).
pub fn round_quantile(before: &Reading, after: &Reading, q: f64) -> Option<f64> {
    let n = after.rounds.checked_sub(before.rounds)?;
    if n == 0 {
        return None;
    }
    let rank = q * n as f64;
    let mut lower = (0.0, 0u64);
    for &(le, cumulative) in &after.round_buckets {
        let earlier = before
            .round_buckets
            .iter()
            .find(|(b, _)| *b == le)
            .map_or(0, |(_, c)| *c);
        let here = cumulative.saturating_sub(earlier);
        if here as f64 >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let within = (here - lower.1) as f64;
            let fraction = if within > 0.0 {
                (rank - lower.1 as f64) / within
            } else {
                1.0
            };
            return Some(lower.0 + (le - lower.0) * fraction.clamp(0.0, 1.0));
        }
        lower = (le, here);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_is_read_from_the_buckets_between_two_readings() {
        let page = |a: u64, b: u64, c: u64| {
            format!(
                "drover_scheduling_round_seconds_sum 1.0\n\
                 drover_scheduling_round_seconds_count {c}\n\
                 drover_scheduling_round_seconds_bucket{{le=\"0.01\"}} {a}\n\
                 drover_scheduling_round_seconds_bucket{{le=\"0.02\"}} {b}\n\
                 drover_scheduling_round_seconds_bucket{{le=\"+Inf\"}} {c}\n"
            )
        };
        let reading = |text: &str| {
            let (round_buckets, rounds) = round_histogram(text);
            Reading {
                round_buckets,
                rounds,
                ..Reading::default()
            }
        };
        // Before: 10 rounds under 10 ms. After: 10 more under 10 ms and 10 between 10 and 20 ms.
        let before = reading(&page(10, 10, 10));
        let after = reading(&page(20, 30, 30));
        let median = round_quantile(&before, &after, 0.5).unwrap();
        assert!((median - 0.01).abs() < 1e-9, "{median}");
        let p75 = round_quantile(&before, &after, 0.75).unwrap();
        assert!((p75 - 0.015).abs() < 1e-9, "{p75}");
        assert_eq!(round_quantile(&after, &after, 0.5), None);
    }
}
