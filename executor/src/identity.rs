//! The node's TLS identity, for a gateway that uses mutual TLS (`https://`): the authority the
//! executor trusts the gateway by, its own key (made here, never sent anywhere) and the client
//! certificate the server issued for it. All three are kept in the data directory beside the node
//! credential (the key with mode 0600). The certificate is renewed with the credential when a third
//! of its life is left, or when it expired while the executor was down.
//!
//! The authority is given as its certificate (`--gateway-ca FILE`), or as its pin
//! (`--gateway-ca-hash sha256:…`): then the first connection trusts a gateway whose chain holds
//! the pinned authority and verifies the gateway's certificate against it, and the authority the
//! server returns at enrolment is kept once its pin is checked.

use crate::config::GatewayTrust;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// The gateway's authority, kept from enrolment.
pub const AUTHORITY_FILE: &str = "gateway-ca.pem";
/// The node's private key.
pub const KEY_FILE: &str = "node-key.pem";
/// The node's client certificate.
pub const CERTIFICATE_FILE: &str = "node-cert.pem";

fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(Some(text)),
        Ok(_) => Ok(None),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Writes under a temporary name (mode 0600), synced, then renamed over `name`.
fn write(data_dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let temporary = data_dir.join(format!("{name}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, data_dir.join(name))
}

/// `sha256:` and the hex digest of a certificate's DER: how `--gateway-ca-hash` names an authority.
pub fn pin_of(certificate: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(certificate)))
}

fn first_certificate(pem: &str) -> anyhow::Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|err| anyhow::anyhow!("not a PEM certificate: {err}"))
}

/// How the executor trusts the gateway now: the authority's certificate where it has one (given,
/// or kept from enrolment), else the pin.
#[derive(Debug, Clone)]
pub enum Trust {
    Authority(String),
    Pin(String),
}

/// The trust for an `https://` gateway, from the configuration and what the data directory keeps.
pub fn trust(configured: &GatewayTrust, data_dir: &Path) -> anyhow::Result<Trust> {
    let kept = read(&data_dir.join(AUTHORITY_FILE))?;
    match (configured, kept) {
        (GatewayTrust::Authority(pem), _) => Ok(Trust::Authority(pem.clone())),
        (GatewayTrust::Pin(pin), Some(kept)) => {
            // The kept authority must still be the pinned one (a pin changed to another cluster's).
            if pin_of(&first_certificate(&kept)?) == *pin {
                Ok(Trust::Authority(kept))
            } else {
                Ok(Trust::Pin(pin.clone()))
            }
        }
        (GatewayTrust::Pin(pin), None) => Ok(Trust::Pin(pin.clone())),
        (GatewayTrust::Kept, Some(kept)) => Ok(Trust::Authority(kept)),
        (GatewayTrust::Kept, None) => Err(crate::fatal::Fatal(
            "the gateway uses TLS (https://) but this executor was given no authority to trust it by: pass --gateway-ca FILE or --gateway-ca-hash sha256:… (both from `drover gateway-ca`)".to_owned(),
        )
        .into()),
    }
}

/// Keeps the authority the server returned, once it is the one trusted.
pub fn keep_authority(trust: &Trust, returned: &str, data_dir: &Path) -> anyhow::Result<()> {
    if returned.trim().is_empty() {
        return Ok(());
    }
    let returned_pin = pin_of(&first_certificate(returned)?);
    let trusted = match trust {
        Trust::Authority(pem) => pin_of(&first_certificate(pem)?),
        Trust::Pin(pin) => pin.clone(),
    };
    if returned_pin != trusted {
        return Err(crate::fatal::Fatal(format!(
            "the server's certificate authority ({returned_pin}) is not the one this executor trusts ({trusted})"
        ))
        .into());
    }
    write(data_dir, AUTHORITY_FILE, returned)?;
    Ok(())
}

/// The node's kept key and certificate, if it has both.
pub fn kept(data_dir: &Path) -> std::io::Result<Option<(String, String)>> {
    Ok(read(&data_dir.join(KEY_FILE))?.zip(read(&data_dir.join(CERTIFICATE_FILE))?))
}

/// A certificate signing request for the node's key (made and kept first, when it has none).
pub fn signing_request(data_dir: &Path, node: &str) -> anyhow::Result<String> {
    let key = match read(&data_dir.join(KEY_FILE))? {
        Some(pem) => rcgen::KeyPair::from_pem(&pem)?,
        None => {
            let key = rcgen::KeyPair::generate()?;
            write(data_dir, KEY_FILE, &key.serialize_pem())?;
            key
        }
    };
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, node);
    Ok(params.serialize_request(&key)?.pem()?)
}

/// Keeps the certificate the server issued.
pub fn keep_certificate(data_dir: &Path, pem: &str) -> std::io::Result<()> {
    write(data_dir, CERTIFICATE_FILE, pem)
}

/// Forgets the certificate (one the server no longer takes): the next connection renews it.
pub fn forget_certificate(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(data_dir.join(CERTIFICATE_FILE)) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Whether a certificate is to be renewed at `now` (seconds since the epoch): a third or less of
/// its life left, or unreadable.
pub fn due(certificate_pem: &str, now: i64) -> bool {
    let Ok(der) = first_certificate(certificate_pem) else {
        return true;
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(&der) else {
        return true;
    };
    let (from, until) = (
        parsed.validity().not_before.timestamp(),
        parsed.validity().not_after.timestamp(),
    );
    until - now <= (until - from) / 3
}

/// Trusts a server whose chain holds the pinned authority, and verifies its certificate against
/// that authority as any other verifier would (name, validity, signature).
#[derive(Debug)]
pub struct Pinned {
    pin: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl Pinned {
    pub fn new(pin: String) -> Self {
        Pinned {
            pin,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(authority) = intermediates.iter().find(|c| pin_of(c) == self.pin) else {
            return Err(rustls::Error::General(format!(
                "the gateway's chain does not hold the authority {}",
                self.pin
            )));
        };
        let mut roots = rustls::RootCertStore::empty();
        roots.add(authority.clone().into_owned())?;
        rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .build()
        .map_err(|err| rustls::Error::General(err.to_string()))?
        .verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The endpoint's TLS for `trust`, presenting the node's certificate when `identity` is given.
pub fn endpoint(
    endpoint: tonic::transport::Endpoint,
    trust: &Trust,
    identity: Option<&(String, String)>,
) -> anyhow::Result<tonic::transport::Endpoint> {
    let mut config = tonic::transport::ClientTlsConfig::new();
    if let Some((key, certificate)) = identity {
        config = config.identity(tonic::transport::Identity::from_pem(certificate, key));
    }
    Ok(match trust {
        Trust::Authority(pem) => endpoint
            .tls_config(config.ca_certificate(tonic::transport::Certificate::from_pem(pem)))?,
        Trust::Pin(pin) => {
            endpoint.tls_config_with_verifier(config, Arc::new(Pinned::new(pin.clone())))?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_due_for_renewal_with_a_third_of_its_life_left() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let start = time::OffsetDateTime::from_unix_timestamp(1_000_000).unwrap();
        params.not_before = start;
        params.not_after = start + time::Duration::seconds(3000);
        let pem = params.self_signed(&key).unwrap().pem();
        assert!(!due(&pem, 1_000_000 + 1999));
        assert!(due(&pem, 1_000_000 + 2000));
        assert!(due(&pem, 1_000_000 + 5000));
        assert!(due("not a certificate", 0));
    }

    #[test]
    fn the_key_is_made_once_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = signing_request(dir.path(), "gpu-1").unwrap();
        let key = std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap();
        let second = signing_request(dir.path(), "gpu-1").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap(),
            key
        );
        assert!(first.contains("CERTIFICATE REQUEST") && second.contains("CERTIFICATE REQUEST"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn only_the_trusted_authority_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let authority = rcgen::CertificateParams::default()
            .self_signed(&key)
            .unwrap();
        let other = rcgen::CertificateParams::default()
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let pin = pin_of(authority.der());
        let err = keep_authority(&Trust::Pin(pin.clone()), &other.pem(), dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("not the one this executor trusts"),
            "{err}"
        );
        assert!(read(&dir.path().join(AUTHORITY_FILE)).unwrap().is_none());
        keep_authority(&Trust::Pin(pin.clone()), &authority.pem(), dir.path()).unwrap();
        // From then on the kept authority is trusted by its certificate.
        match trust(&GatewayTrust::Pin(pin), dir.path()).unwrap() {
            Trust::Authority(pem) => assert_eq!(pem, authority.pem()),
            other => panic!("{other:?}"),
        }
        let err = trust(&GatewayTrust::Kept, tempfile::tempdir().unwrap().path()).unwrap_err();
        assert!(err.to_string().contains("--gateway-ca"), "{err}");
    }
}
