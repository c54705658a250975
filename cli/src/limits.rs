//! The server's limit flags (`drover server --rate-limit ...`), parsed into `drover_runtime::limits::Limits`.

/// What one caller or one tenant may take (0 turns a limit off).
#[derive(Debug, clap::Args)]
pub struct LimitArgs {
    /// API requests a second per token; more get `429` with `Retry-After`.
    #[arg(long, env = "DROVER_RATE_LIMIT", default_value_t = 50.0)]
    rate_limit: f64,
    /// Requests a token may make at once above its rate.
    #[arg(long, env = "DROVER_RATE_LIMIT_BURST", default_value_t = 200.0)]
    rate_limit_burst: f64,
    /// Jobs a tenant may have waiting (queued or paused); further submissions get `429`.
    #[arg(
        long,
        env = "DROVER_MAX_QUEUED_JOBS_PER_TENANT",
        default_value_t = 10_000
    )]
    max_queued_jobs_per_tenant: u32,
    /// Log lines a second a tenant's tasks may report (bursts of ten times as many); more are dropped.
    #[arg(long, env = "DROVER_TENANT_LOG_RATE", default_value_t = 2_000.0)]
    tenant_log_rate: f64,
    /// Metric samples a second a tenant's tasks may report (bursts of ten times as many).
    #[arg(long, env = "DROVER_TENANT_METRIC_RATE", default_value_t = 1_000.0)]
    tenant_metric_rate: f64,
}

impl LimitArgs {
    pub fn limits(&self) -> anyhow::Result<drover_runtime::limits::Limits> {
        use drover_runtime::limits::{Limits, Rate};
        for (flag, value) in [
            ("--rate-limit", self.rate_limit),
            ("--rate-limit-burst", self.rate_limit_burst),
            ("--tenant-log-rate", self.tenant_log_rate),
            ("--tenant-metric-rate", self.tenant_metric_rate),
        ] {
            if !value.is_finite() || value < 0.0 {
                anyhow::bail!("{flag} must be a number of at least 0, got {value}");
            }
        }
        if self.rate_limit > 0.0 && self.rate_limit_burst < 1.0 {
            anyhow::bail!("--rate-limit-burst must be at least 1 when --rate-limit is on");
        }
        let tenant = |per_second: f64| Rate {
            per_second,
            burst: (per_second * 10.0).max(1.0),
        };
        Ok(Limits {
            requests: Rate {
                per_second: self.rate_limit,
                burst: self.rate_limit_burst,
            },
            max_queued_jobs_per_tenant: self.max_queued_jobs_per_tenant,
            log_lines: tenant(self.tenant_log_rate),
            metric_samples: tenant(self.tenant_metric_rate),
        })
    }
}
