//! Encryption on every hop, with real processes: the REST API over HTTPS with a certificate that is
//! rotated without a restart, plain HTTP refused off loopback, and the executor gateway's mutual
//! TLS — an executor enrols with a signing request and trusts the gateway by its authority (file or
//! pin), and a session without the node's certificate, with another authority's, or with a revoked
//! node's, is refused.

use super::harness::*;
use serde_json::json;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A test authority and a server certificate from it for 127.0.0.1 and localhost, PEM.
struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl TestCa {
    fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf for `names` with `usage`: its certificate and key, PEM.
    fn leaf(&self, names: &[&str], usage: rcgen::ExtendedKeyUsagePurpose) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        params.extended_key_usages = vec![usage];
        (
            params.signed_by(&key, &self.issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    }
}

/// The certificate the server at `address` presents now, as DER.
async fn presented(address: &str, ca_pem: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

use rustls::pki_types::pem::PemObject;

fn der(pem: &str) -> Vec<u8> {
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// `drover server` on SQLite in `dir` with `flags`; the process and its first output lines.
fn server(dir: &std::path::Path, flags: &[&str]) -> Proc {
    let database = format!("sqlite://{}", dir.join("drover.db").display());
    let mut args = vec![
        "server",
        "--database-url",
        &database,
        "--gateway-listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    Proc::spawn(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_over_https_takes_a_rotated_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let (cert, key) = ca.leaf(
        &["127.0.0.1", "localhost"],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    let proc = server(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    let url = proc.wait_for_line("drover server listening on ");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let address = url.trim_start_matches("https://").to_owned();

    // A client trusting the test authority is served; plain HTTP on the same port is not.
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let health = https.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    assert!(
        reqwest::get(format!("http://{address}/healthz"))
            .await
            .is_err_and(|err| !err.is_status()),
        "plain HTTP was answered on the TLS port"
    );
    // The CLI trusts it through DROVER_CA_CERT.
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let cli = Command::new(drover())
        .args(["whoami", "--server", &url, "--token", ADMIN_TOKEN])
        .env("DROVER_CA_CERT", &ca_file)
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let untrusting = Command::new(drover())
        .args(["whoami", "--server", &url, "--token", ADMIN_TOKEN])
        .env_remove("DROVER_CA_CERT")
        .output()
        .unwrap();
    assert!(!untrusting.status.success());

    // Rotated in place, as cert-manager does: the next handshake presents the new certificate.
    assert_eq!(presented(&address, &ca.pem).await, der(&cert));
    let (cert2, key2) = ca.leaf(
        &["127.0.0.1", "localhost"],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(&cert_path, &cert2).unwrap();
    std::fs::write(&key_path, &key2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while presented(&address, &ca.pem).await != der(&cert2) {
        assert!(
            Instant::now() < deadline,
            "the rotated certificate was not served within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let health = https.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_is_served_off_loopback_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let refused = Command::new(drover())
        .args([
            "server",
            "--listen",
            "0.0.0.0:0",
            "--gateway-listen",
            "127.0.0.1:0",
        ])
        .arg("--database-url")
        .arg(format!("sqlite://{}", dir.path().join("a.db").display()))
        .arg("--data-dir")
        .arg(dir.path())
        .env("DROVER_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("plain HTTP off loopback") && message.contains("--allow-plain-http"),
        "{message}"
    );
    assert_eq!(message.trim().lines().count(), 1, "{message}");
    let allowed = server(dir.path(), &["--listen", "0.0.0.0:0", "--allow-plain-http"]);
    let url = allowed.wait_for_line("drover server listening on ");
    assert!(url.starts_with("http://0.0.0.0:"), "{url}");
}

/// A client of the gateway trusting its authority, presenting `identity` (certificate, key) if any.
async fn client_with(
    cluster: &Cluster,
    authority: &str,
    identity: Option<(String, String)>,
) -> Result<
    drover_proto::executor_gateway_client::ExecutorGatewayClient<tonic::transport::Channel>,
    tonic::transport::Error,
> {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(authority));
    if let Some((certificate, key)) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(certificate, key));
    }
    let channel = tonic::transport::Endpoint::from_shared(cluster.gateway.clone())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await?;
    Ok(drover_proto::executor_gateway_client::ExecutorGatewayClient::new(channel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_takes_only_the_nodes_own_certificate() {
    let mut cluster = Cluster::start().await;
    assert!(
        cluster.gateway.starts_with("https://"),
        "{}",
        cluster.gateway
    );
    // `drover gateway-ca` prints the authority the harness's executors trusted by its pin.
    let output = Command::new(drover())
        .args([
            "gateway-ca",
            "--server",
            &cluster.url,
            "--token",
            ADMIN_TOKEN,
        ])
        .env("DROVER_CA_CERT", &test_authority().file)
        .output()
        .unwrap();
    assert!(output.status.success());
    let authority = String::from_utf8(output.stdout).unwrap();
    assert!(
        authority.starts_with("-----BEGIN CERTIFICATE-----"),
        "{authority}"
    );
    let pin = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        pin.trim().strip_prefix("pin: "),
        cluster.gateway_pin.as_deref()
    );
    let root = cluster.dir.path().to_owned();
    let read =
        |node: &str, file: &str| std::fs::read_to_string(root.join(node).join(file)).unwrap();
    let credential_a = read("exec-a", "node-credential").trim().to_owned();
    // The executor kept the authority it was pinned to, and its key private.
    assert_eq!(read("exec-a", "gateway-ca.pem"), authority);

    // The credential alone, without the node's certificate, opens no session.
    let mut bare = client_with(&cluster, &authority, None).await.unwrap();
    let refused = open_session(&mut bare, &credential_a, "exec-a", 0, 0.0)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("no client certificate"),
        "{refused:?}"
    );

    // A certificate from another authority is refused in the handshake.
    let other = TestCa::new();
    let forged = other.leaf(&["exec-a"], rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    let outcome = match client_with(&cluster, &authority, Some(forged)).await {
        Ok(mut client) => open_session(&mut client, &credential_a, "exec-a", 0, 0.0)
            .await
            .err(),
        Err(err) => Some(tonic::Status::unavailable(err.to_string())),
    };
    assert!(
        outcome.is_some(),
        "a certificate of another authority opened a session"
    );

    // Another node's certificate with this node's credential: refused.
    let identity_b = (
        read("exec-b", "node-cert.pem"),
        read("exec-b", "node-key.pem"),
    );
    let mut as_b = client_with(&cluster, &authority, Some(identity_b.clone()))
        .await
        .unwrap();
    let refused = open_session(&mut as_b, &credential_a, "exec-a", 0, 0.0)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    // A revoked node's certificate and credential open nothing.
    cluster.post("/api/v1/nodes/exec-b/revoke", json!({})).await;
    cluster.kill_executor("exec-b");
    let credential_b = read("exec-b", "node-credential").trim().to_owned();
    let mut revoked = client_with(&cluster, &authority, Some(identity_b))
        .await
        .unwrap();
    let refused = open_session(&mut revoked, &credential_b, "exec-b", 0, 0.0)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // An executor given the authority as a file enrols with a token minted for it and runs.
    let ca_file = cluster.dir.path().join("gateway-ca.pem");
    std::fs::write(&ca_file, &authority).unwrap();
    let token = cluster
        .post(
            "/api/v1/enrollment-tokens",
            json!({"name": "exec-c", "node": "exec-c"}),
        )
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let data_dir = cluster.executor_dir("exec-c");
    let mut args = vec![
        "executor",
        "--gateway",
        &cluster.gateway,
        "--gateway-ca",
        ca_file.to_str().unwrap(),
        "--enrollment-token",
        &token,
        "--name",
        "exec-c",
        "--slots",
        "1",
        "--memory-gb",
        "64",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(sandbox_flags());
    let executor = Proc::spawn_with_env(&args, &[("DROVER_ENROLLMENT_TOKEN", "")]);
    executor.wait_for_line("drover executor ");
    cluster.executors.push(("exec-c".to_owned(), executor));
    cluster
        .wait_until("exec-c healthy", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await;
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["name"] == "exec-c" && n["health"] == "healthy")
                .then_some(())
        })
        .await;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data_dir.join("node-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

/// With client certificates of a few minutes, a connected executor renews its certificate before
/// it expires, over its session, and keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_executor_renews_its_certificate_before_it_expires() {
    let cluster = Cluster::start_configured(1, &["--node-certificate-lifetime", "1m"], &[]).await;
    let first =
        std::fs::read_to_string(cluster.executor_dir("exec-a").join("node-cert.pem")).unwrap();
    // A third of two minutes (a minute's backdate and the minute) is 40 s; checks every 30 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now =
            std::fs::read_to_string(cluster.executor_dir("exec-a").join("node-cert.pem")).unwrap();
        if now != first {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the certificate was not renewed within 90 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Past the first certificate's expiry, the node is still healthy.
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(cluster.healthy_nodes().await, 2);
}
