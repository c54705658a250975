//! TLS on the server's listeners: the REST API's certificate from files (reloaded as they change)
//! and the executor gateway's mutual TLS under the cluster's authority, whose gateway certificate
//! this replica issues itself and renews while it serves. Handshakes run each in their own task,
//! bounded in time, so a client that connects and stalls holds up no one else's.

use super::connections::Guarded;
use drover_runtime::tls::authority::Authority;
use drover_runtime::tls::{self, Presented};
use futures::Stream;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// How long a client has to complete its TLS handshake.
pub const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);
/// How long this replica's gateway certificate is valid; it is reissued a third of the way in.
const GATEWAY_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Handshaken gateway connections not yet taken by the gRPC server, at most.
const HANDSHAKEN_QUEUE: usize = 256;

/// The REST listener's TLS: its certificate from files, reloaded in the background until `stop`.
pub fn rest_acceptor(
    files: &tls::files::CertFiles,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<TlsAcceptor> {
    let presented = Presented::new(files.load().map_err(|err| {
        anyhow::anyhow!(
            "--tls-cert {} / --tls-key {}: {err}",
            files.certificate.display(),
            files.key.display()
        )
    })?);
    tokio::spawn(
        files
            .clone()
            .watch(presented.clone(), tls::files::RELOAD_EVERY, stop),
    );
    Ok(TlsAcceptor::from(Arc::new(tls::server_config(presented)?)))
}

/// The gateway's TLS: a certificate for `names` issued by the authority (reissued while serving,
/// until `stop`), client certificates verified against it.
pub fn gateway_acceptor(
    authority: Arc<Authority>,
    names: Vec<String>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<TlsAcceptor> {
    let issue = {
        let authority = authority.clone();
        move || -> anyhow::Result<rustls::sign::CertifiedKey> {
            let (chain, key) = authority.issue_server(&names, GATEWAY_CERTIFICATE_LIFETIME)?;
            Ok(tls::files::certified_key(chain.as_bytes(), key.as_bytes())?)
        }
    };
    let presented = Presented::new(issue()?);
    let renewing = presented.clone();
    tokio::spawn(async move {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(GATEWAY_CERTIFICATE_LIFETIME / 3) => {}
            }
            match issue() {
                Ok(key) => {
                    renewing.replace(key);
                    tracing::info!("renewed the executor gateway's certificate");
                }
                Err(err) => {
                    tracing::error!(error = %err, "cannot renew the executor gateway's certificate")
                }
            }
        }
    });
    let mut config = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(authority.client_verifier()?)
        .with_cert_resolver(presented);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The gateway's connections once their handshakes are done; a failed or stalled handshake is
/// dropped (and logged at debug), never ending the stream.
pub fn handshaken(
    incoming: impl Stream<Item = io::Result<Guarded<TcpStream>>> + Send + 'static,
    acceptor: TlsAcceptor,
    stop: impl Future<Output = ()> + Send + 'static,
) -> ReceiverStream<io::Result<TlsStream<Guarded<TcpStream>>>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(HANDSHAKEN_QUEUE);
    tokio::spawn(async move {
        use futures::StreamExt;
        tokio::pin!(incoming);
        tokio::pin!(stop);
        loop {
            let next = tokio::select! {
                () = &mut stop => return,
                next = incoming.next() => next,
            };
            let Some(Ok(connection)) = next else {
                if next.is_none() {
                    return;
                }
                continue;
            };
            let acceptor = acceptor.clone();
            let sender = sender.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(connection)).await {
                    Ok(Ok(stream)) => {
                        let _ = sender.send(Ok(stream)).await;
                    }
                    Ok(Err(err)) => {
                        tracing::debug!(error = %err, "a gateway TLS handshake failed")
                    }
                    Err(_) => tracing::debug!("a gateway TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(receiver)
}
