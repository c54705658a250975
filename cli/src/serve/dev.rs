//! `drover dev`: a server on SQLite with its dashboard and local executors in one process, its admin
//! token and secret key kept in the data directory; with `--demo`, the example jobs submitted and
//! followed to the end.

use super::*;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Address to listen on: a loopback address (the dev server speaks plain HTTP; `drover server`
    /// serves HTTPS to other machines).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Submit the example jobs in examples/ once the server is up, and follow them to the end.
    #[arg(long)]
    demo: bool,
    /// Where the demo's example jobs are.
    #[arg(long, default_value = "examples")]
    examples: PathBuf,
    /// Local executors to start, each with its own data directory under the data directory.
    #[arg(long, default_value_t = 2)]
    executors: u32,
    /// Pretend GPUs each local executor advertises (tasks run on the CPU).
    #[arg(long, default_value_t = 2)]
    gpus_per_executor: u32,
    /// Scheduling policy.
    #[arg(long, default_value = "drover")]
    policy: String,
    /// Start over: remove the data directory's database, checkpoints and executor state first (its
    /// admin token and secret key stay).
    #[arg(long)]
    fresh: bool,
    /// CPUs each local executor advertises. Default: this host's (the local executors share them);
    /// with --demo, enough for the demo's five-task parameter-server job, which the banner says.
    #[arg(long)]
    cpus_per_executor: Option<u32>,
    /// Run tasks unsandboxed, as this process's user, on purpose. Without it each task runs in a
    /// sandbox of its own where this host allows it (as root, with runc), and the banner says when
    /// it does not.
    #[arg(long)]
    no_sandbox: bool,
}

/// Reads the dev admin token, or creates one (mode 0600) on the first start.
fn dev_admin_token(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(crate::config::TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_owned()),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
    let token = drover_store::tokens::generate_token();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    std::io::Write::write_all(&mut file, format!("{token}\n").as_bytes())?;
    Ok(token)
}

pub async fn dev(args: DevArgs, global: &GlobalArgs) -> anyhow::Result<()> {
    init_tracing(
        LogFormat::Text,
        "warn,drover_api=info,drover_runtime=info,drover_service=info,drover_executor=info",
    );
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {}: the dev server speaks plain HTTP and listens on loopback only (127.0.0.1 or ::1); to serve other machines run `drover server` with --tls-cert and --tls-key",
            args.listen
        );
    }
    let data_dir = &global.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let token = dev_admin_token(data_dir)?;
    let db_path = data_dir.join("drover.db");
    if args.fresh {
        fresh_start(data_dir)?;
    }
    let earlier = db_path.exists();
    let checkpoints = data_dir.join("checkpoints");
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    // The demo's `digits-ps` runs 3 workers and 2 PS shards at a CPU each: more task slots than a
    // small host's cores, which its tasks then share.
    let demo_cpus = 4 * args.gpus_per_executor.max(1);
    let cpus_per_executor = match args.cpus_per_executor {
        Some(cpus) => cpus.max(1),
        None if args.demo => host_cpus.max(demo_cpus),
        None => host_cpus,
    };
    let cluster = ClusterArgs {
        gateway_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        advertise_gateway: None,
        gateway_plaintext: false,
        gateway_ca_cert: None,
        gateway_ca_key: None,
        gateway_tls_names: Vec::new(),
        node_certificate_lifetime: std::time::Duration::from_secs(30 * 24 * 3600),
        policy: args.policy.clone(),
        checkpoint_dir: Some(checkpoints.clone()),
        checkpoint_store: None,
        executor_timeout: std::time::Duration::from_secs(10),
        stop_grace: std::time::Duration::from_secs(10),
        tick: std::time::Duration::from_secs(1),
        log_retention: Retention::DEFAULT_LOGS,
        metric_retention: Retention::DEFAULT_METRICS,
        thin_metrics_after: Retention::DEFAULT_THINNING,
        // Each local executor enrols with a token minted for it (`dev_enrollment`).
        enrollment_token: None,
        kubernetes: false,
        kubernetes_tenant_label: String::new(),
        kubernetes_mirror: false,
    };
    let config = ServerConfig {
        listen: args.listen,
        database_url: format!("sqlite://{}", db_path.display()),
        max_db_connections: 8,
        max_body_bytes: 1 << 20,
        admin_token: Some(token.clone()),
        cluster: Some(cluster.config(data_dir).await?),
        kubernetes: None,
        limits: drover_runtime::limits::Limits::default(),
        secrets: Some(std::sync::Arc::new(
            drover_store::secrets::SecretBox::load_or_create(&data_dir.join(SECRET_KEY_FILE))?,
        )),
        pages: drover_web::router(),
        sso: None,
        // The API on loopback; the local executors' gateway with mutual TLS, as a cluster's.
        encryption: server::Encryption {
            api: None,
            allow_plain_http: false,
            gateway: Some(server::GatewayEncryption {
                names: Vec::new(),
                node_certificate_lifetime: std::time::Duration::from_secs(30 * 24 * 3600),
                authority_files: None,
            }),
        },
    };
    let running = server::start(config, server::shutdown_signal()).await?;
    let url = format!("http://{}", running.addr);
    let gateway = running
        .gateway_addr
        .map(|addr| format!("https://{addr}"))
        .context("the dev server has no executor gateway")?;
    let authority = running
        .gateway_authority
        .as_ref()
        .map(|authority| authority.certificate_pem().to_owned())
        .context("the dev server's gateway has no certificate authority")?;
    // Each local executor sandboxes its tasks where the host allows; none sees the server's data.
    let sandbox_args = crate::node::SandboxArgs {
        no_sandbox: args.no_sandbox,
        ..crate::node::SandboxArgs::default()
    };
    let mut sandboxing = None;
    for i in 0..args.executors {
        let name = format!("local-{i}");
        let executor_dir = data_dir.join("executors").join(&name);
        let enrollment_token = dev_enrollment(running.store.as_ref(), &name, &executor_dir).await?;
        let executor = crate::node::ExecutorArgs {
            gateway: gateway.clone(),
            name: Some(name),
            data_dir: executor_dir,
            slots: None,
            demo_gpus: Some(args.gpus_per_executor),
            demo_gpu_memory_gb: 16,
            gpu_model: None,
            cpus: Some(cpus_per_executor),
            memory_gb: None,
            labels: Vec::new(),
            taints: Vec::new(),
            advertise_host: "127.0.0.1".to_owned(),
            enrollment_token,
            gateway_ca: None,
            gateway_ca_hash: None,
            kubernetes_node_labels: false,
            sandbox: sandbox_args.clone(),
            pods: crate::node::PodArgs::default(),
        };
        let mut config = crate::node::executor_config(executor)?;
        config.gateway_trust = drover_executor::GatewayTrust::Authority(authority.clone());
        let hidden = vec![
            data_dir
                .canonicalize()
                .unwrap_or_else(|_| data_dir.to_path_buf()),
        ];
        let opened = sandbox_args.open(&config, hidden).await;
        sandboxing.get_or_insert_with(|| match &opened {
            Ok(Some(sandbox)) => format!("each task in its own ({})", sandbox.describe()),
            Ok(None) => "off (--no-sandbox): tasks run as this process's user, unconfined".to_owned(),
            Err(why) => format!(
                "OFF: {why}. Tasks run as this process's user, unconfined (--no-sandbox says so on purpose)"
            ),
        });
        config.sandbox = opened.ok().flatten();
        let agent = drover_executor::Agent::new(config)?;
        tokio::spawn(async move {
            if let Err(err) = agent.run(std::future::pending()).await {
                eprintln!("local executor: {err:#}");
            }
        });
    }
    out!("Drover dev server");
    if earlier {
        out!(
            "  (carrying on from earlier runs: {} holds their jobs and history; `drover dev --fresh` starts over)",
            data_dir.display()
        );
    }
    out!("  URL:          {url}");
    out!("  Dashboard:    {url}/login#token={token}   (signs the browser in as the admin)");
    out!("  Admin token:  {token}");
    out!("  API docs:     {url}/api/v1/docs");
    out!("  Database:     {} (SQLite)", db_path.display());
    out!("  Checkpoints:  {}", checkpoints.display());
    out!(
        "  Executors:    {} local, {} demo GPUs, {} CPUs and this host's {} GB of memory each (tasks run on the CPU), policy {}",
        args.executors,
        args.gpus_per_executor,
        cpus_per_executor,
        crate::node::host_memory_gb(),
        args.policy
    );
    if let Some(sandboxing) = &sandboxing {
        out!("  Sandboxes:    {sandboxing}");
    }
    if cpus_per_executor > host_cpus {
        out!(
            "                ({} CPUs each is more than this host's {host_cpus}, which the tasks share{})",
            cpus_per_executor,
            if args.cpus_per_executor.is_none() {
                ": the demo's parameter-server job needs the room; --cpus-per-executor sets it"
            } else {
                ""
            }
        );
    }
    out!();
    // The CLI finds this server from any directory through its context.
    let mut config = crate::config::Config::load().unwrap_or_default();
    config.set_current(
        "dev",
        crate::config::Context {
            server: url.clone(),
            token: token.clone(),
            sso: None,
        },
    );
    match config.save() {
        Ok(path) => out!(
            "  CLI context:  `dev`, current ({}): the drover CLI talks to this server from any directory",
            path.display()
        ),
        Err(err) => eprintln!("warning: cannot save the CLI context `dev`: {err:#}"),
    }
    out!();
    out!("In another terminal (`cargo install --path cli` puts drover on your PATH):");
    if args.demo {
        // The demo takes the examples' names, which are unique in a tenant.
        out!("  drover jobs && drover logs -f <job id>");
        out!(
            "  drover submit examples/digits-command.yaml    # again and again: a generateName job"
        );
    } else {
        out!(
            "  drover submit examples/sleep-command.yaml && drover jobs && drover logs -f <job id>"
        );
    }
    out!(
        "Train jobs run on Drover's engine and command jobs as processes, both on the local executors' CPU. Ctrl-C stops everything."
    );
    if args.demo {
        // Ctrl-C ends the demo quietly (its next request would find the server gone).
        tokio::select! {
            result = crate::demo::demo(&url, &token, &args.examples) => {
                if let Err(err) = result {
                    eprintln!("demo: {err:#}");
                }
            }
            () = server::shutdown_signal() => {}
        }
    }
    running
        .serving
        .await
        .context("the server task failed")?
        .context("serving failed")?;
    Ok(())
}

/// `drover dev --fresh`: removes what a run keeps (the database, checkpoints, the executors' state).
fn fresh_start(data_dir: &Path) -> anyhow::Result<()> {
    let mut removed = Vec::new();
    for name in ["drover.db", "drover.db-wal", "drover.db-shm"] {
        let path = data_dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(err).with_context(|| format!("cannot remove {}", path.display()));
            }
        }
    }
    for name in ["checkpoints", "executors"] {
        let path = data_dir.join(name);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(err).with_context(|| format!("cannot remove {}", path.display()));
            }
        }
    }
    if !removed.is_empty() {
        out!(
            "--fresh: removed the earlier runs' database, checkpoints and executor state in {}",
            data_dir.display()
        );
    }
    Ok(())
}

/// A one-time enrolment token for a local executor: at every start each one is enrolled afresh (its
/// earlier credential revoked and forgotten), since a credential pins the capacity its node first
/// advertised and `--gpus-per-executor` or `--cpus-per-executor` may have changed: dev is its own
/// cluster administrator.
async fn dev_enrollment(
    store: &dyn drover_store::Store,
    name: &str,
    executor_dir: &Path,
) -> anyhow::Result<Option<String>> {
    use drover_store::tokens::{ENROLLMENT_PREFIX, display_prefix, generate_secret, hash_token};
    drover_executor::credential::forget(executor_dir)?;
    store.revoke_node_credentials(name).await?;
    let admin = store
        .first_cluster_admin()
        .await?
        .context("the dev server has no cluster administrator")?;
    let secret = generate_secret(ENROLLMENT_PREFIX);
    store
        .create_enrollment_token(&drover_store::NewEnrollmentToken {
            name: format!("drover dev: {name}"),
            token_hash: hash_token(&secret),
            prefix: display_prefix(&secret),
            uses: 1,
            created_by: admin.id,
            expires_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
            node_name: Some(name.to_owned()),
        })
        .await?;
    Ok(Some(secret))
}
