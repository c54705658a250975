//! TLS for the server's two listeners: the REST API's certificate from files, reloaded when they
//! change ([`files`]), and the executor gateway's mutual TLS under the cluster's own certificate
//! authority ([`authority`]), which signs every replica's gateway certificate and every executor's
//! client certificate. Everything here runs on `ring`, the provider the rest of the tree uses.

pub mod authority;
pub mod files;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::{Arc, RwLock};

/// Why a certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

impl From<rcgen::Error> for TlsError {
    fn from(err: rcgen::Error) -> Self {
        TlsError::Invalid(err.to_string())
    }
}

impl From<rustls::Error> for TlsError {
    fn from(err: rustls::Error) -> Self {
        TlsError::Invalid(err.to_string())
    }
}

/// The crypto provider every TLS configuration here is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate a listener presents, replaceable while it serves: a handshake takes whichever
/// is in place when it starts, so a renewed or reloaded certificate needs no restart.
#[derive(Debug)]
pub struct Presented(RwLock<Arc<CertifiedKey>>);

impl Presented {
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Presented(RwLock::new(Arc::new(key))))
    }

    /// Puts `key` in place for the next handshakes.
    pub fn replace(&self, key: CertifiedKey) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(key);
    }

    /// The certificate in place now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for Presented {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A server configuration presenting `presented`, speaking HTTP/2 and HTTP/1.1 (ALPN), without
/// client certificates.
pub fn server_config(presented: Arc<Presented>) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(presented);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
