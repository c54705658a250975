//! What a fleet run measured, as JSON (`-o json`) or as lines for a person.

use serde::Serialize;

/// The busy fleet after the measured phase (every job started, every task reporting a step every
/// 10 s): how long it was watched, the server's CPU, the database's growth and rows written.
#[derive(Debug, Clone, Serialize)]
pub struct Steady {
    pub seconds: f64,
    pub server_cpu_percent: f64,
    pub database_growth_mib_per_hour: f64,
    pub rows_written_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub policy: String,
    /// Whether the gateway used mutual TLS (each node with its client certificate).
    pub gateway_mutual_tls: bool,
    /// Jobs started before the measured phase.
    pub running_before: u32,
    pub jobs_submitted: usize,
    /// Of those, the jobs whose task ran within the phase.
    pub jobs_started: usize,
    /// From the first enrolment to every node registered.
    pub fleet_up_s: f64,
    /// The time the measured submissions took.
    pub submit_s: f64,
    pub jobs_submitted_per_s: f64,
    /// Jobs started, over the time from the first submission to the last start.
    pub jobs_started_per_s: f64,
    pub submit_to_running_p50_s: Option<f64>,
    pub submit_to_running_p99_s: Option<f64>,
    pub submit_to_running_max_s: Option<f64>,
    /// Scheduling rounds during the phase, and their times (read from the server's histogram, whose
    /// buckets are √2 apart: interpolated within one).
    pub rounds: u64,
    pub round_p50_ms: Option<f64>,
    pub round_p99_ms: Option<f64>,
    /// From a high-priority job's submission to its task running on a reclaimed GPU (the server
    /// starts it as it stops the victim, whose checkpoint may still be under way).
    pub reclaim_s: Option<f64>,
    /// From that submission to the victim's exit after its checkpoint.
    pub reclaim_victim_exited_s: Option<f64>,
    /// Why `reclaim_s` is absent.
    pub reclaim_note: Option<String>,
    pub idle_server_cpu_percent: f64,
    pub idle_server_rss_mib: f64,
    /// The server's CPU over the phase, in percent of one core.
    pub server_cpu_percent: f64,
    /// The server's largest resident memory seen during the phase.
    pub server_rss_mib: f64,
    /// Postgres's transactions and rows inserted, updated or deleted in the run's database, a
    /// second, over the phase (`pg_stat_database`).
    pub postgres_transactions_per_s: f64,
    pub postgres_rows_written_per_s: f64,
    /// Postgres's autovacuum was off, so the run vacuumed and analyzed its database itself every
    /// 30 s, as autovacuum would have.
    pub vacuumed_by_bench: bool,
    /// The database's size at the end of the phase, and how fast it grew over the phase and over
    /// the idle fleet's (MiB an hour).
    pub database_mib: f64,
    pub database_growth_mib_per_hour: f64,
    pub idle_database_growth_mib_per_hour: f64,
    /// The busy fleet after the phase; `None` when it was not watched (`--steady 0s`).
    pub steady: Option<Steady>,
    /// The machine's one-minute load average at the end, and its CPUs.
    pub load_average: Option<f64>,
    pub cpus: usize,
    pub sessions_broken: u64,
    pub refused_reports: u64,
    pub tasks_checkpointed_on_stop: u64,
    /// Failed submissions, broken sessions and refused reports.
    pub errors: usize,
    pub error_samples: Vec<String>,
}

impl Report {
    /// The report as lines for a person.
    pub fn text(&self) -> String {
        let secs = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} s"));
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
        let mut out = format!(
            "fleet: {} nodes x {} GPUs, policy {}, gateway {}, {} CPUs (load average {} at the end)\n",
            self.nodes,
            self.gpus_per_node,
            self.policy,
            if self.gateway_mutual_tls {
                "mutual TLS"
            } else {
                "plaintext"
            },
            self.cpus,
            self.load_average
                .map_or_else(|| "-".to_owned(), |l| format!("{l:.2}")),
        );
        out += &format!("  fleet registered in        {:.1} s\n", self.fleet_up_s);
        out += &format!(
            "  idle server                {:.1}% of a core, {:.0} MiB resident\n",
            self.idle_server_cpu_percent, self.idle_server_rss_mib
        );
        if self.running_before > 0 {
            out += &format!(
                "  started before the phase   {} jobs\n",
                self.running_before
            );
        }
        out += &format!(
            "  submitted                  {} jobs in {:.1} s ({:.0}/s)\n",
            self.jobs_submitted, self.submit_s, self.jobs_submitted_per_s
        );
        out += &format!(
            "  started                    {} jobs, {:.1}/s\n",
            self.jobs_started, self.jobs_started_per_s
        );
        out += &format!(
            "  submit to running          p50 {}, p99 {}, max {}\n",
            secs(self.submit_to_running_p50_s),
            secs(self.submit_to_running_p99_s),
            secs(self.submit_to_running_max_s)
        );
        out += &format!(
            "  scheduling rounds          {} rounds, p50 {}, p99 {}\n",
            self.rounds,
            ms(self.round_p50_ms),
            ms(self.round_p99_ms)
        );
        out += &format!(
            "  server under load          {:.1}% of a core, {:.0} MiB resident at most\n",
            self.server_cpu_percent, self.server_rss_mib
        );
        out += &format!(
            "  postgres                   {:.0} transactions/s, {:.0} rows written/s{}\n",
            self.postgres_transactions_per_s,
            self.postgres_rows_written_per_s,
            if self.vacuumed_by_bench {
                " (autovacuum off: the run vacuumed every 30 s)"
            } else {
                ""
            }
        );
        out += &format!(
            "  database                   {:.0} MiB at the end; grew {:.0} MiB/h under load, {:.1} MiB/h idle\n",
            self.database_mib,
            self.database_growth_mib_per_hour,
            self.idle_database_growth_mib_per_hour
        );
        if let Some(steady) = &self.steady {
            out += &format!(
                "  busy fleet, {:.0} s          {:.1}% of a core; database grew {:.0} MiB/h, {:.0} rows written/s\n",
                steady.seconds,
                steady.server_cpu_percent,
                steady.database_growth_mib_per_hour,
                steady.rows_written_per_s
            );
        }
        out += &format!(
            "  reclaim                    {}\n",
            match (&self.reclaim_s, &self.reclaim_note) {
                (Some(s), note) => format!(
                    "{s:.2} s from submission to running; the victim exited {}{}",
                    secs(self.reclaim_victim_exited_s),
                    note.as_ref()
                        .map_or_else(String::new, |n| format!(" ({n})"))
                ),
                (None, Some(note)) => note.clone(),
                (None, None) => "-".to_owned(),
            }
        );
        out += &format!(
            "  errors                     {} ({} sessions broken, {} reports refused)\n",
            self.errors, self.sessions_broken, self.refused_reports
        );
        for sample in &self.error_samples {
            out += &format!("    {sample}\n");
        }
        out
    }
}
