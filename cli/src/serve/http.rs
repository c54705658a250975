//! Serving the HTTP application (the REST API and the dashboard) on its listener, through the
//! connection gate (`connections.rs`), with hyper's header-read timeout: a client has
//! [`ConnectionLimits::header_read`](super::connections::ConnectionLimits) to send a request's
//! headers, so a trickle of header lines (slowloris) is closed. (`axum::serve` gives hyper no timer,
//! so hyper's timeouts never fire under it.) Shutdown stops accepting and lets requests in flight
//! finish, for up to [`DRAIN`]. With TLS, each connection's handshake runs in the connection's own
//! task, within [`HANDSHAKE_WITHIN`](super::tls::HANDSHAKE_WITHIN).

use super::connections::Gate;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long requests in flight (a followed log, a long download) may take to finish at shutdown.
pub const DRAIN: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    gate: Gate,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(gate.limits().header_read)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of descriptors, most likely: the gate frees some as connections end.
                tracing::warn!(error = %err, "cannot accept a connection; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Responses go out as soon as they are written: with Nagle's algorithm a response written
        // in two parts (over TLS, a record each) waited for the client's delayed acknowledgement.
        let _ = stream.set_nodelay(true);
        let stream = gate.admit(stream, peer.ip());
        // Handlers and the rate limit see the client's address (per-address buckets for
        // credentials not yet seen to work).
        let encrypted = tls.is_some();
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                // Served over TLS here: what a proxy in front would say, so the session cookie
                // is Secure (the client's own header is not taken for it on a TLS connection).
                if encrypted {
                    request.headers_mut().insert(
                        "x-forwarded-proto",
                        axum::http::HeaderValue::from_static("https"),
                    );
                }
                request
            },
        ));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(connection.into_owned()).await
                }
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(super::tls::HANDSHAKE_WITHIN, acceptor.accept(stream));
                    let stream = match handshake.await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(err)) => {
                            tracing::debug!(error = %err, %peer, "a TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "a TLS handshake timed out");
                            return;
                        }
                    };
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(connection.into_owned()).await
                }
            };
            if let Err(err) = served {
                tracing::debug!(error = %err, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_s = DRAIN.as_secs(),
            "requests still running at shutdown were cut off"
        );
    }
    Ok(())
}
