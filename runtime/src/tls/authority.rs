//! The executor gateway's certificate authority. One per cluster, kept in the store with its private
//! key sealed by the server key ([`Authority::load_or_create`]): the first replica to start makes it,
//! every replica signs with it. It issues each replica's gateway certificate (for the names
//! executors dial) and each executor's client certificate, from a signing request whose key never
//! leaves the executor. A client certificate names its node (common name) and the node credential
//! it was issued with (a `urn:drover:credential:` URI), so revoking the node's credential revokes
//! its certificates too: the gateway checks both on every session.

use super::{TlsError, provider};
use drover_store::Store;
use drover_store::secrets::SecretBox;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The URI prefix naming, in a client certificate, the node credential it goes with.
const CREDENTIAL_URI: &str = "urn:drover:credential:";
/// The name the authority's private key is sealed under (as the cluster's own secret: the nil
/// tenant, which no tenant has).
const SEALED_AS: &str = "gateway-ca-key";
/// The authority's and gateways' certificates start an hour back, for executors' clocks a little
/// behind. A node's starts a minute back: the servers that issue it are the ones that check it (a
/// longer backdate would also eat into the short lifetimes tests give them).
const BACKDATE: Duration = Duration::from_secs(3600);
const NODE_BACKDATE: Duration = Duration::from_secs(60);
/// How long the authority itself is valid.
const AUTHORITY_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Mutual TLS on the executor gateway: the authority that issues executors' client certificates,
/// and how long those are valid (executors renew theirs when a third of that is left).
#[derive(Debug)]
pub struct GatewayTls {
    pub authority: Arc<Authority>,
    pub node_certificate_lifetime: Duration,
}

/// The cluster's certificate authority for the executor gateway.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    certificate: CertificateDer<'static>,
    pem: String,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("pin", &self.pin())
            .finish_non_exhaustive()
    }
}

/// What a client certificate says of the executor presenting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub node: String,
    pub credential: Uuid,
    /// Seconds since the Unix epoch.
    pub not_after: i64,
}

fn serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // Positive, as DER integers are signed.
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

fn validity(params: &mut CertificateParams, lifetime: Duration, backdate: Duration) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - backdate;
    params.not_after = now + lifetime;
}

fn san(name: &str) -> Result<SanType, TlsError> {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    Ok(SanType::DnsName(name.try_into().map_err(|_| {
        TlsError::Invalid(format!("`{name}` is not a host name"))
    })?))
}

impl Authority {
    /// A new authority with a fresh key (ECDSA P-256).
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "Drover executor gateway CA");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Drover");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(serial());
        validity(&mut params, AUTHORITY_LIFETIME, BACKDATE);
        let certificate = params.self_signed(&key)?;
        Ok(Authority {
            pem: certificate.pem(),
            certificate: certificate.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The authority from its certificate and private key (PEM: PKCS#8, or an RSA key in PKCS#1 as
    /// Helm's `genCA` writes it).
    pub fn from_pem(certificate_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let key = if key_pem.contains("BEGIN RSA PRIVATE KEY") {
            let pkcs1 = rustls::pki_types::PrivatePkcs1KeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|err| TlsError::Invalid(format!("the authority's key: {err}")))?;
            KeyPair::try_from(pkcs8_of_rsa(pkcs1.secret_pkcs1_der()).as_slice())
        } else {
            KeyPair::from_pem(key_pem)
        }
        .map_err(|err| TlsError::Invalid(format!("the authority's key: {err}")))?;
        let certificate = CertificateDer::from_pem_slice(certificate_pem.as_bytes())
            .map_err(|err| TlsError::Invalid(format!("the authority's certificate: {err}")))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&certificate)
            .map_err(|err| TlsError::Invalid(format!("the authority's certificate: {err}")))?;
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(TlsError::Invalid(
                "the authority's key does not go with its certificate".to_owned(),
            ));
        }
        Ok(Authority {
            issuer: Issuer::from_ca_cert_der(&certificate, key)?,
            pem: certificate_pem.to_owned(),
            certificate,
        })
    }

    /// The cluster's authority: the one kept in the store, or a new one kept there (the first of
    /// replicas starting together wins, and every one of them uses it).
    pub async fn load_or_create(store: &dyn Store, secrets: &SecretBox) -> anyhow::Result<Self> {
        let cluster = drover_core::TenantId(Uuid::nil());
        let kept = match store.gateway_authority().await? {
            Some(kept) => kept,
            None => {
                let made = Authority::generate()?;
                let sealed = secrets.seal(cluster, SEALED_AS, made.key_pem().as_bytes());
                store.keep_gateway_authority(&made.pem, &sealed).await?
            }
        };
        let key = secrets.open(cluster, SEALED_AS, &kept.1).map_err(|err| {
            anyhow::anyhow!("cannot open the executor gateway's certificate authority: {err}")
        })?;
        let key = String::from_utf8(key)
            .map_err(|_| anyhow::anyhow!("the gateway authority's key is damaged"))?;
        Ok(Authority::from_pem(&kept.0, &key)?)
    }

    /// The authority's certificate (PEM): what executors trust the gateway by.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.certificate
    }

    /// The authority's private key (PKCS#8 PEM).
    fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// The pin of the authority's certificate: `sha256:` and the hex digest of its DER.
    pub fn pin(&self) -> String {
        pin_of(&self.certificate)
    }

    /// A server certificate for `names` (host names or IP addresses), with a fresh key: the chain
    /// (the certificate, then the authority's) and the key, both PEM.
    pub fn issue_server(
        &self,
        names: &[String],
        lifetime: Duration,
    ) -> Result<(String, String), TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        params.subject_alt_names = names.iter().map(|n| san(n)).collect::<Result<_, _>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.serial_number = Some(serial());
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, lifetime, BACKDATE);
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok((
            format!("{}{}", certificate.pem(), self.pem),
            key.serialize_pem(),
        ))
    }

    /// A client certificate for the node, for the requester's key. Nothing else of the request is
    /// used: the certificate says the node, the credential, client authentication, and no more.
    pub fn issue_node(
        &self,
        request: &SigningRequest,
        node: &str,
        credential: Uuid,
        lifetime: Duration,
    ) -> Result<String, TlsError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, node);
        params.subject_alt_names = vec![SanType::URI(
            format!("{CREDENTIAL_URI}{credential}")
                .try_into()
                .map_err(|_| TlsError::Invalid("credential URI".to_owned()))?,
        )];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(serial());
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, lifetime, NODE_BACKDATE);
        Ok(params.signed_by(&request.0.public_key, &self.issuer)?.pem())
    }

    /// Verifies client certificates against this authority; a connection without one is let in
    /// (enrolment needs none), and the gateway refuses it everything else.
    pub fn client_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.certificate.clone())?;
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|err| TlsError::Invalid(err.to_string()))
    }
}

/// A DER length.
fn der_length(length: usize, out: &mut Vec<u8>) {
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes = length.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// An RSA key in PKCS#1 wrapped as PKCS#8 (RFC 5208): version 0, the rsaEncryption algorithm with
/// NULL parameters, the PKCS#1 key as the octet string.
fn pkcs8_of_rsa(pkcs1: &[u8]) -> Vec<u8> {
    const VERSION_AND_ALGORITHM: [u8; 18] = [
        0x02, 0x01, 0x00, // INTEGER 0
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
        0x00, // SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
    ];
    let mut octets = vec![0x04];
    der_length(pkcs1.len(), &mut octets);
    octets.extend_from_slice(pkcs1);
    let mut out = vec![0x30];
    der_length(VERSION_AND_ALGORITHM.len() + octets.len(), &mut out);
    out.extend_from_slice(&VERSION_AND_ALGORITHM);
    out.extend_from_slice(&octets);
    out
}

/// A certificate signing request whose signature checked: its key is the requester's.
#[derive(Debug)]
pub struct SigningRequest(CertificateSigningRequestParams);

impl SigningRequest {
    /// Reads a PKCS#10 request (PEM) and checks its signature.
    pub fn from_pem(pem: &str) -> Result<Self, TlsError> {
        if pem.len() > 16 * 1024 {
            return Err(TlsError::Invalid("over 16 KiB".to_owned()));
        }
        CertificateSigningRequestParams::from_pem(pem)
            .map(SigningRequest)
            .map_err(|err| TlsError::Invalid(err.to_string()))
    }
}

/// `sha256:` and the hex digest of a certificate's DER.
pub fn pin_of(certificate: &CertificateDer<'_>) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(certificate)))
}

/// What a client certificate (already verified against the authority) says: its node and
/// credential. `None` for a certificate that names no credential.
pub fn node_identity(certificate: &CertificateDer<'_>) -> Option<NodeIdentity> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let node = parsed
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    let credential = parsed
        .subject_alternative_name()
        .ok()
        .flatten()?
        .value
        .general_names
        .iter()
        .find_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => uri
                .strip_prefix(CREDENTIAL_URI)
                .and_then(|id| id.parse::<Uuid>().ok()),
            _ => None,
        })?;
    Some(NodeIdentity {
        node,
        credential,
        not_after: parsed.validity().not_after.timestamp(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &KeyPair, ca: bool) -> String {
        let mut params = CertificateParams::new(vec!["ignored.example".to_owned()]).unwrap();
        if ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        params.serialize_request(key).unwrap().pem().unwrap()
    }

    #[test]
    fn a_node_certificate_names_its_node_and_credential_and_nothing_the_request_asked() {
        let authority = Authority::generate().unwrap();
        let key = KeyPair::generate().unwrap();
        let credential = Uuid::now_v7();
        // A request asking to be an authority gets a client certificate all the same.
        let asked = SigningRequest::from_pem(&request(&key, true)).unwrap();
        let pem = authority
            .issue_node(&asked, "gpu-1", credential, Duration::from_secs(600))
            .unwrap();
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        let identity = node_identity(&der).unwrap();
        assert_eq!(identity.node, "gpu-1");
        assert_eq!(identity.credential, credential);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(!parsed.is_ca());
        assert_eq!(
            parsed.public_key().subject_public_key.data.as_ref(),
            key.public_key_raw()
        );
        let lifetime = identity.not_after - time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((590..=600).contains(&lifetime), "{lifetime}");
        // The authority's chain verifies it as a client certificate.
        let verifier = authority.client_verifier().unwrap();
        verifier
            .verify_client_cert(&der, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
        // Another authority's does not.
        let other = Authority::generate().unwrap();
        assert!(
            other
                .client_verifier()
                .unwrap()
                .verify_client_cert(&der, &[], rustls::pki_types::UnixTime::now())
                .is_err()
        );
    }

    #[test]
    fn a_forged_or_oversized_request_is_refused() {
        let key = KeyPair::generate().unwrap();
        let pem = request(&key, false);
        // The last byte of the DER is the signature's: flipped, the signature no longer checks.
        let mut der =
            rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec();
        *der.last_mut().unwrap() ^= 1;
        let pem = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der)
        );
        assert!(SigningRequest::from_pem(&request(&key, false)).is_ok());
        assert!(SigningRequest::from_pem(&pem).is_err());
        let huge = "x".repeat(20_000);
        let err = SigningRequest::from_pem(&huge).unwrap_err();
        assert!(err.to_string().contains("16 KiB"));
    }

    /// An RSA authority with its key in PKCS#1, as Helm's `genCA` and `openssl genrsa -traditional`
    /// write it, issues certificates its chain verifies.
    #[test]
    fn an_rsa_authority_in_pkcs1_issues_node_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let (key, cert) = (dir.path().join("ca.key"), dir.path().join("ca.crt"));
        let openssl = |args: &[&str]| {
            let status = std::process::Command::new("openssl")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status()
                .expect("openssl (Debian's openssl package) makes the test's RSA authority");
            assert!(status.success(), "openssl {args:?}");
        };
        openssl(&[
            "genrsa",
            "-traditional",
            "-out",
            key.to_str().unwrap(),
            "2048",
        ]);
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            key.to_str().unwrap(),
            "-subj",
            "/CN=helm-ca",
            "-days",
            "2",
            "-out",
            cert.to_str().unwrap(),
        ]);
        let key_pem = std::fs::read_to_string(&key).unwrap();
        assert!(key_pem.contains("BEGIN RSA PRIVATE KEY"));
        let authority =
            Authority::from_pem(&std::fs::read_to_string(&cert).unwrap(), &key_pem).unwrap();
        let node_key = KeyPair::generate().unwrap();
        let asked = SigningRequest::from_pem(&request(&node_key, false)).unwrap();
        let pem = authority
            .issue_node(&asked, "gpu-2", Uuid::nil(), Duration::from_secs(600))
            .unwrap();
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        authority
            .client_verifier()
            .unwrap()
            .verify_client_cert(&der, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
    }

    #[test]
    fn the_authority_round_trips_through_pem_and_refuses_a_key_not_its_own() {
        let authority = Authority::generate().unwrap();
        let again = Authority::from_pem(authority.certificate_pem(), &authority.key_pem()).unwrap();
        assert_eq!(again.pin(), authority.pin());
        let other = Authority::generate().unwrap();
        let err = Authority::from_pem(authority.certificate_pem(), &other.key_pem()).unwrap_err();
        assert!(err.to_string().contains("does not go with"), "{err}");
    }
}
