//! The composition root: open the store and migrate, make sure a cluster administrator exists, then
//! assemble the parts — the runtime (scheduling loop and executor gateway, with leader election on
//! Postgres), the experiment driver, the Kubernetes controller when asked for, and the HTTP
//! application (REST API and dashboard) over one [`drover_service::Service`] — and serve.

use super::connections::{ConnectionLimits, Gate};
use anyhow::Context;
use drover_api::state::AppState;
use drover_controller::controller::Settings as KubernetesSettings;
use drover_runtime::{GatewayService, Runtime, RuntimeConfig, SchedulingLoop};
use drover_service::bootstrap::{AdminBootstrap, ensure_cluster_admin};
use drover_store::{self as store, Store};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub database_url: String,
    pub max_db_connections: u32,
    pub max_body_bytes: usize,
    /// A token the cluster administrator must be able to use (from `DROVER_ADMIN_TOKEN`, or dev's file).
    pub admin_token: Option<String>,
    /// Run jobs: the executor gateway on this address, and the scheduling loop. `None` serves the API
    /// only (jobs then stay queued).
    pub cluster: Option<(SocketAddr, RuntimeConfig)>,
    /// Run the DroverJob and DroverExperiment controller (while leading) with these settings; only
    /// with `cluster`.
    pub kubernetes: Option<KubernetesSettings>,
    pub limits: drover_runtime::limits::Limits,
    /// The key tenant secrets are sealed with; `None`: the server keeps no secrets.
    pub secrets: Option<Arc<drover_store::secrets::SecretBox>>,
    /// More routes served beside the API's (the dashboard's pages), under the same middleware.
    pub pages: axum::Router<AppState>,
}

/// A server listening and serving in the background.
#[derive(Debug)]
pub struct RunningServer {
    pub addr: SocketAddr,
    /// Where executors dial in, when the server runs jobs.
    pub gateway_addr: Option<SocketAddr>,
    pub admin: AdminBootstrap,
    pub store: Arc<dyn Store>,
    pub serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

pub async fn open_store(config: &ServerConfig) -> anyhow::Result<Arc<dyn Store>> {
    let store = store::connect(&config.database_url, config.max_db_connections)
        .await
        .with_context(|| {
            format!(
                "cannot open the database at {}",
                redact_url(&config.database_url)
            )
        })?;
    store
        .migrate()
        .await
        .context("cannot apply database migrations")?;
    Ok(store)
}

/// Opens the store, migrates, bootstraps the administrator and starts serving until `shutdown` resolves.
pub async fn start(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<RunningServer> {
    let store = open_store(&config).await?;
    let admin = ensure_cluster_admin(store.as_ref(), config.admin_token.as_deref())
        .await
        .context("cannot create the cluster administrator")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let mut state = AppState::new(store.clone(), config.max_body_bytes)
        .with_limits(config.limits)
        .with_shutdown(stopped.clone());
    if let Some(secrets) = &config.secrets {
        state = state.with_secrets(secrets.clone());
    }
    let mut gateway_addr = None;
    if let Some((gateway_listen, mut cluster)) = config.cluster {
        cluster.secrets = config.secrets.clone();
        cluster.limits = config.limits;
        let gateway_listener = TcpListener::bind(gateway_listen)
            .await
            .with_context(|| format!("cannot listen for executors on {gateway_listen}"))?;
        let bound = gateway_listener.local_addr()?;
        gateway_addr = Some(bound);
        let advertised = cluster
            .advertise_gateway
            .clone()
            .unwrap_or_else(|| advertised_gateway(bound));
        let uri: Result<tonic::transport::Uri, _> = advertised.parse();
        if !uri
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
        {
            anyhow::bail!("--advertise-gateway `{advertised}`: expected http://HOST:PORT");
        }
        // Several replicas share a Postgres database: the one holding the lock leads. SQLite has one.
        let leader = match store.backend() {
            store::Backend::Postgres => drover_runtime::leader::campaign(
                config.database_url.clone(),
                store.clone(),
                format!("{}/{}", host_name(), std::process::id()),
                advertised.clone(),
                stopped.clone(),
            ),
            store::Backend::Sqlite => drover_runtime::leader::always(),
        };
        let runtime = Runtime::replica(store.clone(), cluster, leader);
        let scheduling = SchedulingLoop::new(runtime.clone())
            .with_context(|| format!("cannot run the policy `{}`", runtime.config.policy))?;
        let service = GatewayService::new(runtime.clone()).into_server();
        let incoming = super::connections::gated(
            gateway_listener,
            Gate::new(ConnectionLimits::for_this_process()),
        );
        let gateway_stopped = signalled(stopped.clone());
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)))
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, gateway_stopped)
                .await;
            if let Err(err) = served {
                tracing::error!(error = %err, "the executor gateway failed");
            }
        });
        tokio::spawn(scheduling.run(signalled(stopped.clone())));
        tracing::info!(addr = %bound, policy = runtime.config.policy, "executor gateway listening");
        let kubernetes = config.kubernetes.clone();
        let leader = runtime.leader.clone();
        tokio::spawn(drover_runtime::retention::run(
            store.clone(),
            runtime.config.retention,
            leader.clone(),
            signalled(stopped.clone()),
        ));
        state = state.with_runtime(runtime);
        tokio::spawn(drover_service::experiments::run(
            state.service.clone(),
            leader.clone(),
            signalled(stopped.clone()),
        ));
        if let Some(settings) = kubernetes {
            // kube's error already says what it tried: one line, not its whole chain again.
            let client = kube::Client::try_default().await.map_err(|err| {
                anyhow::anyhow!(
                    "--kubernetes: cannot configure a Kubernetes client (in a pod: its service account; elsewhere: KUBECONFIG or ~/.kube/config): {err}"
                )
            })?;
            let ctx = drover_controller::controller::Context::new(
                state.service.clone(),
                client,
                settings,
            );
            tokio::spawn(drover_controller::controller::run(
                ctx,
                leader,
                stopped.clone(),
            ));
            tracing::info!(
                "DroverJob and DroverExperiment controller on (it reconciles while this replica leads)"
            );
        }
    }
    let router = drover_api::routes::app_with(state, config.pages.clone());
    let serving = tokio::spawn(async move {
        super::http::serve(
            listener,
            router,
            Gate::new(ConnectionLimits::for_this_process()),
            signalled(stopped),
        )
        .await
    });
    tracing::info!(%addr, backend = ?store.backend(), "drover server listening");
    Ok(RunningServer {
        addr,
        gateway_addr,
        admin,
        store,
        serving,
    })
}

/// This host's name, for messages and the leader record.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Where executors reach a gateway bound to `bound`: its address, or this host's name when it
/// listens on every interface.
fn advertised_gateway(bound: SocketAddr) -> String {
    if bound.ip().is_unspecified() {
        format!("http://{}:{}", host_name(), bound.port())
    } else {
        format!("http://{bound}")
    }
}

/// Resolves once the shutdown flag is set.
async fn signalled(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// A database URL without its password, for messages: the one in its user part
/// (`postgres://user:***@host`) and any query parameter that names a password, secret or token
/// (`?password=***`).
pub fn redact_url(url: &str) -> String {
    let (address, query) = match url.split_once('?') {
        Some((address, query)) => (address, Some(query)),
        None => (url, None),
    };
    let mut out = match (address.find("://"), address.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &address[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => {
                    format!("{}{user}:***{}", &address[..scheme_end + 3], &address[at..])
                }
                None => address.to_owned(),
            }
        }
        _ => address.to_owned(),
    };
    if let Some(query) = query {
        let secret = |key: &str| {
            let key = key.to_ascii_lowercase();
            ["pass", "secret", "token"]
                .iter()
                .any(|word| key.contains(word))
        };
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if secret(key) => format!("{key}=***"),
                _ => param.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("postgres://drover:s3cret@db:5432/drover"),
            "postgres://drover:***@db:5432/drover"
        );
        assert_eq!(
            redact_url("postgres://postgres@127.0.0.1/x"),
            "postgres://postgres@127.0.0.1/x"
        );
        assert_eq!(
            redact_url("sqlite://.drover/drover.db"),
            "sqlite://.drover/drover.db"
        );
        assert_eq!(
            redact_url("postgres://db/drover?sslmode=require&password=s3cret&PassWord=x"),
            "postgres://db/drover?sslmode=require&password=***&PassWord=***"
        );
        assert_eq!(
            redact_url("postgres://u:p@db/d?auth_token=t"),
            "postgres://u:***@db/d?auth_token=***"
        );
    }
}
