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
    pub encryption: Encryption,
    /// Single sign-on through an OpenID Connect provider (`--oidc-*`).
    pub sso: Option<drover_service::sso::SsoConfig>,
}

/// How the server's listeners are encrypted.
#[derive(Debug, Clone, Default)]
pub struct Encryption {
    /// The REST API's (and dashboard's) certificate and key, reloaded when the files change;
    /// `None`: plain HTTP, which only a loopback address serves unless `allow_plain_http`.
    pub api: Option<drover_runtime::tls::files::CertFiles>,
    /// Serve plain HTTP off loopback: behind a proxy that terminates TLS.
    pub allow_plain_http: bool,
    /// Mutual TLS on the executor gateway; `None`: plain gRPC (a private network the operator
    /// trusts).
    pub gateway: Option<GatewayEncryption>,
}

/// Mutual TLS on the executor gateway.
#[derive(Debug, Clone)]
pub struct GatewayEncryption {
    /// Names (and addresses) the gateway's certificate is valid for, beside the advertised
    /// gateway's host, the bound address, this host's name and loopback.
    pub names: Vec<String>,
    /// How long an executor's client certificate is valid.
    pub node_certificate_lifetime: std::time::Duration,
    /// The authority's certificate and key files; `None`: the one kept in the database.
    pub authority_files: Option<(std::path::PathBuf, std::path::PathBuf)>,
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
    /// `https` where the API is served over TLS, else `http`.
    pub scheme: &'static str,
    /// The certificate authority executors trust the gateway by, where it uses mutual TLS.
    pub gateway_authority: Option<Arc<drover_runtime::tls::authority::Authority>>,
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
    if config.encryption.api.is_none()
        && !config.encryption.allow_plain_http
        && !config.listen.ip().is_loopback()
    {
        anyhow::bail!(
            "--listen {}: plain HTTP off loopback sends API tokens and secrets in the clear; give --tls-cert and --tls-key, or --allow-plain-http where a proxy in front terminates TLS",
            config.listen
        );
    }
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
    if let Some(sso) = config.sso.clone() {
        if config.secrets.is_none() {
            anyhow::bail!(
                "single sign-on needs the server key (refresh tokens are sealed with it)"
            );
        }
        let every = (sso.refresh_every / 2).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(30),
        );
        let sso = drover_service::sso::Sso::new(sso).context("--oidc-issuer")?;
        state = state.with_sso(Arc::new(sso));
        tokio::spawn(drover_service::sso::run_sweeper(
            state.service.clone(),
            every,
        ));
    }
    let mut gateway_addr = None;
    let mut gateway_authority = None;
    if let Some((gateway_listen, mut cluster)) = config.cluster {
        cluster.secrets = config.secrets.clone();
        cluster.limits = config.limits;
        let gateway_listener = TcpListener::bind(gateway_listen)
            .await
            .with_context(|| format!("cannot listen for executors on {gateway_listen}"))?;
        let bound = gateway_listener.local_addr()?;
        gateway_addr = Some(bound);
        let scheme = if config.encryption.gateway.is_some() {
            "https"
        } else {
            "http"
        };
        let advertised = cluster
            .advertise_gateway
            .clone()
            .unwrap_or_else(|| advertised_gateway(scheme, bound));
        let uri: Result<tonic::transport::Uri, _> = advertised.parse();
        let Some(advertised_host) = uri
            .ok()
            .filter(|u| u.scheme_str() == Some(scheme))
            .and_then(|u| u.host().map(str::to_owned))
        else {
            anyhow::bail!("--advertise-gateway `{advertised}`: expected {scheme}://HOST:PORT");
        };
        let gateway_tls = match &config.encryption.gateway {
            None => None,
            Some(settings) => {
                let authority = match &settings.authority_files {
                    Some((certificate, key)) => {
                        let read = |path: &std::path::Path| {
                            std::fs::read_to_string(path)
                                .with_context(|| format!("cannot read {}", path.display()))
                        };
                        drover_runtime::tls::authority::Authority::from_pem(
                            &read(certificate)?,
                            &read(key)?,
                        )
                        .map_err(|err| {
                            anyhow::anyhow!(
                                "--gateway-ca-cert {} / --gateway-ca-key {}: {err}",
                                certificate.display(),
                                key.display()
                            )
                        })?
                    }
                    None => {
                        let secrets = config.secrets.as_deref().context(
                            "mutual TLS on the executor gateway needs the server's secret key (its authority's key is sealed with it)",
                        )?;
                        drover_runtime::tls::authority::Authority::load_or_create(
                            store.as_ref(),
                            secrets,
                        )
                        .await
                        .context("cannot load the executor gateway's certificate authority")?
                    }
                };
                let authority = Arc::new(authority);
                let mut names = vec![
                    advertised_host,
                    host_name(),
                    "localhost".to_owned(),
                    "127.0.0.1".to_owned(),
                    "::1".to_owned(),
                ];
                if !bound.ip().is_unspecified() {
                    names.push(bound.ip().to_string());
                }
                names.extend(settings.names.iter().cloned());
                names.sort();
                names.dedup();
                let acceptor = super::tls::gateway_acceptor(
                    authority.clone(),
                    names,
                    signalled(stopped.clone()),
                )?;
                gateway_authority = Some(authority.clone());
                tracing::info!(authority = authority.pin(), "executor gateway: mutual TLS");
                cluster.gateway_tls = Some(Arc::new(drover_runtime::tls::authority::GatewayTls {
                    authority,
                    node_certificate_lifetime: settings.node_certificate_lifetime,
                }));
                Some(acceptor)
            }
        };
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
        let gateway = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)))
            .add_service(service);
        let incoming = match gateway_tls {
            Some(acceptor) => futures::future::Either::Left(super::tls::handshaken(
                incoming,
                acceptor,
                signalled(stopped.clone()),
            )),
            None => futures::future::Either::Right(incoming),
        };
        tokio::spawn(async move {
            let served = match incoming {
                futures::future::Either::Left(incoming) => {
                    gateway
                        .serve_with_incoming_shutdown(incoming, gateway_stopped)
                        .await
                }
                futures::future::Either::Right(incoming) => {
                    gateway
                        .serve_with_incoming_shutdown(incoming, gateway_stopped)
                        .await
                }
            };
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
    let tls = match &config.encryption.api {
        Some(files) => Some(super::tls::rest_acceptor(
            files,
            signalled(stopped.clone()),
        )?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let serving = tokio::spawn(async move {
        super::http::serve(
            listener,
            router,
            Gate::new(ConnectionLimits::for_this_process()),
            tls,
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
        scheme,
        gateway_authority,
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
fn advertised_gateway(scheme: &str, bound: SocketAddr) -> String {
    if bound.ip().is_unspecified() {
        format!("{scheme}://{}:{}", host_name(), bound.port())
    } else {
        format!("{scheme}://{bound}")
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
