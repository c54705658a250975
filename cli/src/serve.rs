//! `drover server` and `drover migrate`; `drover dev` (`serve/dev.rs`) builds on the server's options
//! here, and both start the server that `serve/server.rs` assembles.

use crate::global::GlobalArgs;
use crate::logging::{LogFormat, init_tracing};
use crate::output::out;
use anyhow::Context;
use drover_controller::controller::Settings as KubernetesSettings;
use drover_runtime::RuntimeConfig;
use drover_service::bootstrap::{self, AdminBootstrap};
use server::ServerConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub mod connections;
pub mod dev;
mod http;
pub mod server;
mod sso;
mod tls;

/// The file in the data directory that holds the key tenant secrets are sealed with, by default.
pub const SECRET_KEY_FILE: &str = "secret-key";

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "DROVER_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Serve the REST API and dashboard over TLS with this certificate chain (PEM); read again when
    /// it changes (cert-manager's rotations need no restart).
    #[arg(long, env = "DROVER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "DROVER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback: only where a proxy in front terminates
    /// TLS (an ingress, a load balancer). Without TLS the server otherwise refuses to start there.
    #[arg(long, env = "DROVER_ALLOW_PLAIN_HTTP", conflicts_with = "tls_cert")]
    allow_plain_http: bool,
    /// Database: postgres://user@host/db (production) or sqlite://path.
    #[arg(long, env = "DROVER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Connections to the database, at most.
    #[arg(long, env = "DROVER_DB_MAX_CONNECTIONS", default_value_t = 16)]
    db_max_connections: u32,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "DROVER_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,
    /// The cluster administrator's token. Without it, the first start generates one and prints it once.
    #[arg(long, env = "DROVER_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The key tenant secrets are sealed with: 32 bytes, base64 (`openssl rand -base64 32`). Every
    /// replica needs the same one. Without it (and without --secret-key-file) the server keeps its
    /// key in `secret-key` in the data directory, made on the first start.
    #[arg(
        long,
        env = "DROVER_SECRET_KEY",
        hide_env_values = true,
        conflicts_with = "secret_key_file"
    )]
    secret_key: Option<String>,
    /// A file holding the secret key (base64), created with a random key (mode 0600) when missing.
    #[arg(long, env = "DROVER_SECRET_KEY_FILE")]
    secret_key_file: Option<PathBuf>,
    #[command(flatten)]
    limits: crate::limits::LimitArgs,
    /// Log format.
    #[arg(long, env = "DROVER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    sso: sso::SsoArgs,
}

/// How the server runs jobs: the executor gateway and the scheduling loop.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// Address executors dial (gRPC).
    #[arg(long, env = "DROVER_GATEWAY_LISTEN", default_value = "0.0.0.0:7070")]
    gateway_listen: SocketAddr,
    /// Where executors reach this replica's gateway when another replica redirects them to it (the
    /// leader's); default: the gateway's address, or this host's name when it listens on every
    /// interface. On Kubernetes, the pod's IP.
    #[arg(long, env = "DROVER_ADVERTISE_GATEWAY")]
    advertise_gateway: Option<String>,
    /// Serve the executor gateway without TLS: only on a private network you trust, as its traffic
    /// carries every task's environment with its opened secrets. By default the gateway uses
    /// mutual TLS under the cluster's own certificate authority (kept in the database): each
    /// executor gets a client certificate when it enrols and renews it, and trusts the gateway by
    /// the authority (`--gateway-ca` or `--gateway-ca-hash`, from `drover gateway-ca`).
    #[arg(long, env = "DROVER_GATEWAY_PLAINTEXT")]
    gateway_plaintext: bool,
    /// The gateway's certificate authority from files (PEM; an RSA or ECDSA key) rather than the one
    /// the server makes and keeps in the database: a Kubernetes Secret every replica mounts, whose
    /// certificate executors mount too.
    #[arg(
        long,
        env = "DROVER_GATEWAY_CA_CERT",
        requires = "gateway_ca_key",
        conflicts_with = "gateway_plaintext"
    )]
    gateway_ca_cert: Option<PathBuf>,
    /// The private key of --gateway-ca-cert.
    #[arg(long, env = "DROVER_GATEWAY_CA_KEY", requires = "gateway_ca_cert")]
    gateway_ca_key: Option<PathBuf>,
    /// More names (or addresses) the gateway's certificate is valid for, beside the advertised
    /// gateway's host, the address it listens on, this host's name and loopback.
    #[arg(
        long = "gateway-tls-name",
        env = "DROVER_GATEWAY_TLS_NAMES",
        value_delimiter = ','
    )]
    gateway_tls_names: Vec<String>,
    /// How long an executor's client certificate is valid (at least 1m); executors renew theirs
    /// when a third of this is left.
    #[arg(long, env = "DROVER_NODE_CERTIFICATE_LIFETIME", default_value = "30d", value_parser = certificate_lifetime)]
    node_certificate_lifetime: std::time::Duration,
    /// Scheduling policy: fifo, fifo-backfill, drf, tiresias, optimus, gandiva or drover.
    #[arg(long, env = "DROVER_POLICY", default_value = "drover")]
    policy: String,
    /// Checkpoint storage: a directory every executor can reach (a shared filesystem, or this host).
    /// Default: `checkpoints` in the data directory.
    #[arg(long, env = "DROVER_CHECKPOINT_DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoint storage in an S3-compatible object store instead: `s3://bucket/prefix`. Credentials,
    /// region and endpoint come from the standard AWS_* variables (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL), which executors need too.
    #[arg(
        long,
        env = "DROVER_CHECKPOINT_STORE",
        conflicts_with = "checkpoint_dir"
    )]
    checkpoint_store: Option<String>,
    /// An executor not heard from for this long is lost; its jobs go back to the queue.
    #[arg(long, env = "DROVER_EXECUTOR_TIMEOUT", default_value = "15s", value_parser = humantime::parse_duration)]
    executor_timeout: std::time::Duration,
    /// How long a stopping task may take to checkpoint before it is killed.
    #[arg(long, env = "DROVER_STOP_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    stop_grace: std::time::Duration,
    /// A reusable enrolment token executors may enrol with (for fleets that enrol nodes as they come,
    /// such as a DaemonSet); at least 32 characters. Without it, executors enrol only with tokens a
    /// cluster administrator mints (`drover enrollment-token create`). Every executor always
    /// authenticates with its own node credential afterwards.
    #[arg(long, env = "DROVER_ENROLLMENT_TOKEN", hide_env_values = true)]
    enrollment_token: Option<String>,
    /// How long task log lines are kept (of any job, running ones too), or `forever`; the leader
    /// deletes older ones every hour.
    #[arg(long, env = "DROVER_LOG_RETENTION", default_value = "30d", value_parser = retention_period)]
    log_retention: Retention,
    /// How long an ended job's metric samples are kept after it ended, or `forever` (an active job
    /// keeps all of its own).
    #[arg(long, env = "DROVER_METRIC_RETENTION", default_value = "90d", value_parser = retention_period)]
    metric_retention: Retention,
    /// Metric samples older than this (of running jobs too) are thinned: of each metric of each
    /// generation, the first and the last sample of every ten minutes are kept. `never` keeps every
    /// sample for as long as the metric retention does.
    #[arg(long, env = "DROVER_THIN_METRICS_AFTER", default_value = "1d", value_parser = thinning_age)]
    thin_metrics_after: Retention,
    /// The scheduling loop runs at least this often.
    #[arg(long, env = "DROVER_SCHEDULER_TICK", default_value = "1s", value_parser = humantime::parse_duration)]
    tick: std::time::Duration,
    /// Run the DroverJob controller: `kubectl apply` submits, `kubectl delete` cancels (the leading
    /// replica reconciles). Reaches the Kubernetes API with the pod's service account, or KUBECONFIG.
    #[arg(long, env = "DROVER_KUBERNETES")]
    kubernetes: bool,
    /// The namespace label naming the tenant a namespace's DroverJobs belong to; a namespace without
    /// it belongs to the tenant of its own name.
    #[arg(
        long,
        env = "DROVER_KUBERNETES_TENANT_LABEL",
        default_value = drover_controller::controller::DEFAULT_TENANT_LABEL
    )]
    kubernetes_tenant_label: String,
    /// With --kubernetes: jobs submitted over REST or the CLI appear as DroverJob objects too, in
    /// their tenant's namespace (the one labelled with the tenant, or named like it).
    #[arg(long, env = "DROVER_KUBERNETES_MIRROR", requires = "kubernetes")]
    kubernetes_mirror: bool,
}

/// A client certificate's lifetime: at least a minute (renewal needs room), at most a year.
fn certificate_lifetime(text: &str) -> Result<std::time::Duration, String> {
    let lifetime = humantime::parse_duration(text).map_err(|err| err.to_string())?;
    if lifetime < std::time::Duration::from_secs(60) {
        return Err("at least 1m".to_owned());
    }
    if lifetime > std::time::Duration::from_secs(366 * 24 * 3600) {
        return Err("at most 366d".to_owned());
    }
    Ok(lifetime)
}

/// How long something is kept: `None` for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention(Option<std::time::Duration>);

impl Retention {
    const DEFAULT_LOGS: Retention = Retention(drover_runtime::retention::Retention::DEFAULT.logs);
    const DEFAULT_METRICS: Retention =
        Retention(drover_runtime::retention::Retention::DEFAULT.metrics);
    const DEFAULT_THINNING: Retention =
        Retention(drover_runtime::retention::Retention::DEFAULT.thin_metrics);
}

/// `forever`, or a duration of at least an hour (`30d`, `12h`): less would delete a running job's
/// lines as they arrive.
fn retention_period(text: &str) -> Result<Retention, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Retention(None));
    }
    let period = humantime::parse_duration(text.trim()).map_err(|err| {
        format!("{err}: expected a duration such as `30d` or `12h`, or `forever`")
    })?;
    if period < std::time::Duration::from_secs(3600) {
        return Err("at least `1h` (or `forever`)".to_owned());
    }
    Ok(Retention(Some(period)))
}

/// `never`, or an age of at least an hour (`1d`, `12h`): samples younger are the ones the
/// scheduler's speed fits read first.
fn thinning_age(text: &str) -> Result<Retention, String> {
    if text.trim().eq_ignore_ascii_case("never") {
        return Ok(Retention(None));
    }
    let age = humantime::parse_duration(text.trim())
        .map_err(|err| format!("{err}: expected a duration such as `1d` or `12h`, or `never`"))?;
    if age < std::time::Duration::from_secs(3600) {
        return Err("at least `1h` (or `never`)".to_owned());
    }
    Ok(Retention(Some(age)))
}

impl ClusterArgs {
    async fn config(&self, data_dir: &Path) -> anyhow::Result<(SocketAddr, RuntimeConfig)> {
        if drover_scheduler::is_oracle_policy(&self.policy) {
            anyhow::bail!(
                "--policy {}: an oracle baseline needs jobs' hidden truth (lengths, or speeds on each GPU model), which only the simulator has",
                self.policy
            );
        }
        let mut config = match &self.checkpoint_store {
            Some(url) => {
                let storage = drover_runtime::checkpoint_store::ObjectStorage::connect(url).await?;
                let mut config = RuntimeConfig::new(&self.policy, PathBuf::from(storage.root()));
                config.checkpoint_store = Some(std::sync::Arc::new(storage));
                config
            }
            None => {
                let dir = self
                    .checkpoint_dir
                    .clone()
                    .unwrap_or_else(|| data_dir.join("checkpoints"));
                std::fs::create_dir_all(&dir).with_context(|| {
                    format!("cannot create the checkpoint directory {}", dir.display())
                })?;
                let root = dir
                    .canonicalize()
                    .with_context(|| format!("cannot resolve {}", dir.display()))?;
                RuntimeConfig::new(&self.policy, root)
            }
        };
        config.retention = drover_runtime::retention::Retention {
            logs: self.log_retention.0,
            metrics: self.metric_retention.0,
            thin_metrics: self.thin_metrics_after.0,
        };
        config.executor_timeout = self.executor_timeout;
        config.stop_grace = self.stop_grace;
        config.tick = self.tick;
        // Trimmed: a token read from a file or a Kubernetes Secret often ends with a newline.
        let token = self.enrollment_token.as_deref().map(str::trim);
        if let Some(token) = token
            && token.len() < 32
        {
            anyhow::bail!(
                "--enrollment-token (DROVER_ENROLLMENT_TOKEN) must be at least 32 characters (e.g. `openssl rand -base64 32`)"
            );
        }
        config.enrollment_token = token.map(str::to_owned);
        config.advertise_gateway = self.advertise_gateway.clone();
        config.heartbeat_interval =
            (self.executor_timeout / 5).max(std::time::Duration::from_millis(200));
        Ok((self.gateway_listen, config))
    }

    /// The Kubernetes controller's settings, with `--kubernetes`.
    fn kubernetes(&self) -> Option<KubernetesSettings> {
        self.kubernetes.then(|| KubernetesSettings {
            tenant_label: self.kubernetes_tenant_label.clone(),
            mirror: self.kubernetes_mirror,
            instance: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
            ..Default::default()
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Database: postgres://user@host/db or sqlite://path.
    #[arg(long, env = "DROVER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
}

pub async fn server(args: ServerArgs, global: &GlobalArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format, "info,sqlx=warn,tower_http=warn");
    if let Some(token) = &args.admin_token
        && token.len() < 16
    {
        anyhow::bail!("DROVER_ADMIN_TOKEN must be at least 16 characters");
    }
    let secrets = match (&args.secret_key, &args.secret_key_file) {
        (Some(key), _) => drover_store::secrets::SecretBox::from_base64(key)
            .map_err(|err| anyhow::anyhow!("DROVER_SECRET_KEY: {err}"))?,
        (None, file) => {
            let path = file
                .clone()
                .unwrap_or_else(|| global.data_dir.join(SECRET_KEY_FILE));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            drover_store::secrets::SecretBox::load_or_create(&path)?
        }
    };
    let config = ServerConfig {
        listen: args.listen,
        database_url: args.database_url,
        max_db_connections: args.db_max_connections,
        max_body_bytes: args.max_body_bytes,
        admin_token: args.admin_token,
        cluster: Some(args.cluster.config(&global.data_dir).await?),
        kubernetes: args.cluster.kubernetes(),
        limits: args.limits.limits()?,
        secrets: Some(std::sync::Arc::new(secrets)),
        pages: drover_web::router(),
        sso: args.sso.config()?,
        encryption: server::Encryption {
            api: args.tls_cert.zip(args.tls_key).map(|(certificate, key)| {
                drover_runtime::tls::files::CertFiles { certificate, key }
            }),
            allow_plain_http: args.allow_plain_http,
            gateway: (!args.cluster.gateway_plaintext).then(|| server::GatewayEncryption {
                names: args.cluster.gateway_tls_names.clone(),
                node_certificate_lifetime: args.cluster.node_certificate_lifetime,
                authority_files: args
                    .cluster
                    .gateway_ca_cert
                    .clone()
                    .zip(args.cluster.gateway_ca_key.clone()),
            }),
        },
    };
    let running = server::start(config, server::shutdown_signal()).await?;
    if let AdminBootstrap::CreatedWithToken(token) = &running.admin {
        out!(
            "Created cluster administrator `{}` in tenant `{}`. Its API token, shown this once:\n{token}",
            bootstrap::BOOTSTRAP_ADMIN,
            bootstrap::BOOTSTRAP_TENANT
        );
    }
    out!(
        "drover server listening on {}://{}",
        running.scheme,
        running.addr
    );
    if let Some(gateway) = running.gateway_addr {
        match &running.gateway_authority {
            Some(authority) => out!(
                "executor gateway listening on https://{gateway} (mutual TLS; executors trust it with --gateway-ca-hash {})",
                authority.pin()
            ),
            None => out!("executor gateway listening on http://{gateway} (plaintext)"),
        }
    }
    running
        .serving
        .await
        .context("the server task failed")?
        .context("serving failed")?;
    out!("drover server stopped");
    Ok(())
}

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    init_tracing(LogFormat::Text, "warn");
    let config = ServerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        database_url: args.database_url,
        max_db_connections: 2,
        max_body_bytes: 0,
        admin_token: None,
        cluster: None,
        kubernetes: None,
        limits: drover_runtime::limits::Limits::NONE,
        pages: Default::default(),
        secrets: None,
        sso: None,
        encryption: Default::default(),
    };
    server::open_store(&config).await?;
    out!(
        "migrations applied to {}",
        server::redact_url(&config.database_url)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Retention, retention_period, thinning_age};
    use std::time::Duration;

    #[test]
    fn retention_is_a_duration_of_an_hour_or_more_or_forever() {
        assert_eq!(
            retention_period("30d"),
            Ok(Retention(Some(Duration::from_secs(30 * 86_400))))
        );
        assert_eq!(retention_period(" Forever "), Ok(Retention(None)));
        assert_eq!(
            retention_period("59m"),
            Err("at least `1h` (or `forever`)".to_owned())
        );
        let err = retention_period("a month").unwrap_err();
        assert!(err.contains("`30d`"), "{err}");
    }

    #[test]
    fn thinning_age_is_an_hour_or_more_or_never() {
        assert_eq!(
            thinning_age("1d"),
            Ok(Retention(Some(Duration::from_secs(86_400))))
        );
        assert_eq!(thinning_age("Never"), Ok(Retention(None)));
        assert_eq!(
            thinning_age("30m"),
            Err("at least `1h` (or `never`)".to_owned())
        );
        assert!(thinning_age("forever").unwrap_err().contains("`never`"));
    }
}
