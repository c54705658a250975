//! The harness's TLS: the test authority that issues every harness server's certificate (its
//! servers serve HTTPS, as a cluster's do, and whatever the harness starts trusts the authority),
//! and gateway sessions opened as an executor would, for the tests that impersonate one.

use std::path::{Path, PathBuf};

/// The authority the harness's servers' certificates are issued by (one for the test process), and
/// the file holding its certificate, which every process the harness starts trusts
/// (`DROVER_CA_CERT`).
pub struct TestAuthority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
    pub file: PathBuf,
}

impl std::fmt::Debug for TestAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestAuthority")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

pub fn test_authority() -> &'static TestAuthority {
    static AUTHORITY: std::sync::OnceLock<TestAuthority> = std::sync::OnceLock::new();
    AUTHORITY.get_or_init(|| {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::default();
        // Names of their own: a leaf named as its issuer is taken for self-signed by OpenSSL
        // (Node's TLS).
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "drover e2e test authority");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).expect("the test authority").pem();
        let file = std::env::temp_dir().join(format!("drover-e2e-ca-{}.pem", std::process::id()));
        std::fs::write(&file, &pem).expect("write the test authority");
        TestAuthority {
            issuer: rcgen::Issuer::new(params, key),
            pem,
            file,
        }
    })
}

/// A certificate and key for a harness server on loopback, issued by the test authority and kept
/// in `dir` (a restarted server finds them again): their paths.
pub fn server_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    if !cert.exists() {
        std::fs::create_dir_all(dir).unwrap();
        let pair = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "127.0.0.1");
        let issued = params.signed_by(&pair, &test_authority().issuer).unwrap();
        std::fs::write(&key, pair.serialize_pem()).unwrap();
        std::fs::write(&cert, issued.pem()).unwrap();
    }
    (cert, key)
}

/// Opens a gateway session over `client` with `credential` that registers as `node` with `gpus`
/// GPUs of `memory_gb` each; the server's answer (the stream, or the refusal).
pub async fn open_session(
    client: &mut drover_proto::executor_gateway_client::ExecutorGatewayClient<
        tonic::transport::Channel,
    >,
    credential: &str,
    node: &str,
    gpus: u32,
    memory_gb: f64,
) -> Result<(), tonic::Status> {
    use drover_proto as pb;
    let (outbound, receiver) = tokio::sync::mpsc::channel(4);
    outbound
        .send(pb::ExecutorMessage {
            body: Some(pb::executor_message::Body::Register(pb::Register {
                node_name: node.to_owned(),
                executor_id: "probe".into(),
                incarnation: "probe".into(),
                gpus: (0..gpus)
                    .map(|index| pb::Gpu {
                        index,
                        model: "cpu".into(),
                        memory_gb,
                        compute_capability: String::new(),
                    })
                    .collect(),
                cpus: 1,
                memory_gb: 1,
                gpu_source: "slots".into(),
                ..pb::Register::default()
            })),
            seq: 0,
        })
        .await
        .unwrap();
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {credential}").parse().unwrap(),
    );
    client.session(request).await.map(drop)
}
