//! A certificate and key kept in files (PEM), as an operator or cert-manager provides them: read at
//! start, then read again every few seconds and put in place when they changed, so a rotated
//! certificate is served without a restart. A pair that cannot be used (half written, a key of
//! another certificate) leaves the one in place and is logged; it is tried again when the files
//! change again.

use super::{Presented, TlsError, provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the files are read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(5);

/// Where a listener's certificate chain and private key are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A certificate chain and its key from PEM text: the chain's first certificate must be the key's.
pub fn certified_key(chain_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Invalid(format!("the certificate file: {err}")))?;
    if chain.is_empty() {
        return Err(TlsError::Invalid(
            "the certificate file holds no certificate (PEM `BEGIN CERTIFICATE`)".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|err| TlsError::Invalid(format!("the key file: {err}")))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|err| {
        TlsError::Invalid(format!(
            "the key does not go with the certificate, or cannot be used: {err}"
        ))
    })
}

impl CertFiles {
    /// The files' contents now.
    fn contents(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        Ok((read(&self.certificate)?, read(&self.key)?))
    }

    /// Reads the pair: what a listener starts with.
    pub fn load(&self) -> Result<CertifiedKey, TlsError> {
        let (chain, key) = self.contents()?;
        certified_key(&chain, &key)
    }

    /// Reads the files every `every` until `stop` resolves, putting a changed pair in place in
    /// `presented` once it can be used.
    pub async fn watch(
        self,
        presented: Arc<Presented>,
        every: Duration,
        stop: impl Future<Output = ()>,
    ) {
        let mut last = self.contents().ok();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = ticks.tick() => {}
            }
            let files = self.clone();
            // Reading files blocks: off the runtime's threads.
            let Ok(now) = tokio::task::spawn_blocking(move || files.contents()).await else {
                continue;
            };
            let now = match now {
                Ok(now) => now,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the TLS certificate files; serving the one loaded before");
                    continue;
                }
            };
            if last.as_ref() == Some(&now) {
                continue;
            }
            match certified_key(&now.0, &now.1) {
                Ok(key) => {
                    presented.replace(key);
                    tracing::info!(
                        certificate = %self.certificate.display(),
                        "TLS certificate reloaded"
                    );
                    last = Some(now);
                }
                Err(err) => {
                    // Written one file at a time, most likely: the next read sees both.
                    tracing::warn!(error = %err, "the changed TLS certificate files cannot be used yet; serving the one loaded before");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::authority::Authority;

    fn leaf(authority: &Authority, name: &str) -> (String, String) {
        let key = authority
            .issue_server(&[name.to_owned()], Duration::from_secs(3600))
            .expect("issue");
        (key.0, key.1)
    }

    #[tokio::test]
    async fn a_changed_pair_is_put_in_place_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let files = CertFiles {
            certificate: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
        };
        let authority = Authority::generate().unwrap();
        let (cert, key) = leaf(&authority, "one.example");
        std::fs::write(&files.certificate, &cert).unwrap();
        std::fs::write(&files.key, &key).unwrap();
        let presented = Presented::new(files.load().unwrap());
        let first = presented.current().cert[0].clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let watching = tokio::spawn(files.clone().watch(
            presented.clone(),
            Duration::from_millis(20),
            async {
                let _ = stopped.await;
            },
        ));
        // Half a rotation: a new certificate with the old key is refused, the old one served.
        let (cert2, key2) = leaf(&authority, "two.example");
        std::fs::write(&files.certificate, &cert2).unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(presented.current().cert[0], first);
        // The whole rotation: put in place.
        std::fs::write(&files.key, &key2).unwrap();
        let mut replaced = false;
        for _ in 0..100 {
            if presented.current().cert[0] != first {
                replaced = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(replaced, "the rotated certificate was never put in place");
        stop.send(()).unwrap();
        watching.await.unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_with_the_reason() {
        let authority = Authority::generate().unwrap();
        let (cert, _) = leaf(&authority, "one.example");
        let (_, other_key) = leaf(&authority, "two.example");
        let err = certified_key(cert.as_bytes(), other_key.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("does not go with"), "{err}");
        let err = certified_key(b"not pem", other_key.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("no certificate"), "{err}");
    }
}
