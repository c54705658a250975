//! Single sign-on against a real OpenID Connect provider: the npm package `oidc-provider`
//! (`e2e/browser/oidc-provider.mjs`), a real `drover server` over HTTPS on Postgres, Debian's Chromium
//! (`e2e/browser/sso.mjs`) and the `drover` CLI. A browser signs in through the provider's pages and
//! lands as the mapped tenant and role seeing only that tenant's jobs; a replayed callback is refused;
//! a provider refusing the refresh (the account removed) and a group taken away each end a session.
//! The CLI signs in with the device flow, lists its tenant's jobs, renews itself silently, and loses
//! access when its group goes. ID tokens
//! with a forged signature, another client's audience, an expiry past, another issuer are refused;
//! a key the provider rotated in is found by fetching its key set again.

use super::harness::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium as Debian installs it, or where `CHROMIUM` says.
fn chromium() -> Option<String> {
    std::env::var("CHROMIUM").ok().or_else(|| {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .find(|p| Path::new(p).exists())
            .map(|p| (*p).to_owned())
    })
}

/// The provider, killed when dropped.
struct IdentityProvider {
    child: std::process::Child,
    issuer: String,
}

impl Drop for IdentityProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rest of the first of `lines` that starts with `prefix`; `who` names the process in the panic
/// when its output ends first.
fn after_prefix(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    prefix: &str,
    who: &str,
) -> String {
    for line in lines {
        if let Some(rest) = line.unwrap().strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
    panic!("{who} ended before printing `{prefix}`")
}

fn start_provider(accounts: &Path, redirect: &str) -> IdentityProvider {
    let mut child = Command::new("node")
        .arg("oidc-provider.mjs")
        .current_dir(repo_root().join("e2e/browser"))
        .env("OIDC_ACCOUNTS", accounts)
        .env("OIDC_REDIRECT_URI", redirect)
        .env("OIDC_PORT", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run node: install Node.js 20 or later");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let issuer = after_prefix(&mut lines, "oidc-provider listening on ", "the provider");
    // Keep draining its output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    IdentityProvider { child, issuer }
}

fn node(script_args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new("node")
        .args(script_args)
        .current_dir(repo_root().join("e2e/browser"))
        .envs(env.iter().copied())
        .output()
        .expect("cannot run node")
}

fn assert_passed(output: &std::process::Output, what: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("sso: all checks passed"),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `drover ARGS` as the CLI user whose config file is `config`: its exit, stdout and stderr.
fn cli_as(config: &Path, url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(drover())
        .args(args)
        .env("DROVER_CONFIG", config)
        .env("DROVER_CA_CERT", &test_authority().file)
        .env_remove("DROVER_TOKEN")
        .env("DROVER_SERVER", url)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn signed(provider: &str, claims: Value, key: &str) -> String {
    let answer: Value = reqwest::Client::new()
        .post(format!("{provider}/test/sign"))
        .json(&json!({"claims": claims, "key": key}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["token"].as_str().unwrap().to_owned()
}

/// The server's answer to an ID token at the CLI's exchange: status and body.
async fn exchange(cluster: &Cluster, id_token: &str) -> (u16, Value) {
    let response = cluster
        .http
        .post(format!("{}/api/v1/auth/sso/token", cluster.url))
        .json(&json!({ "id_token": id_token }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_sign_on_through_a_real_provider() {
    if std::env::var("DROVER_BROWSER_TESTS").as_deref() == Ok("skip") {
        skip(
            "sso::single_sign_on_through_a_real_provider",
            "DROVER_BROWSER_TESTS=skip",
        );
        return;
    }
    let chromium = chromium().expect(
        "no Chromium: run scripts/test (it installs Debian's chromium), or set CHROMIUM, \
         or DROVER_BROWSER_TESTS=skip",
    );
    let browser_dir = repo_root().join("e2e/browser");
    assert!(
        browser_dir.join("node_modules/oidc-provider").exists(),
        "e2e/browser has no node_modules: run scripts/test, or `npm ci` in e2e/browser"
    );
    let dir = tempfile::tempdir().unwrap();
    let accounts = dir.path().join("accounts.json");
    std::fs::write(
        &accounts,
        json!({
            "alice": {"groups": ["vision-team"]},
            "bob": {"groups": ["speech-team"]},
        })
        .to_string(),
    )
    .unwrap();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let provider = start_provider(&accounts, &format!("{url}/login/sso/callback"));

    let database = drover_store::testing::create_postgres_database().await;
    let data_dir = dir.path().join("server");
    let (cert, key) = server_certificate(&dir.path().join("tls"));
    let listen = format!("127.0.0.1:{port}");
    let gateway = format!("127.0.0.1:{}", free_port());
    let server = Proc::spawn(&[
        "server",
        "--listen",
        &listen,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--gateway-listen",
        &gateway,
        "--database-url",
        &database.url,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--public-url",
        &url,
        "--oidc-issuer",
        &provider.issuer,
        "--oidc-client-id",
        "drover-dashboard",
        "--oidc-client-secret",
        "dashboard-secret",
        "--oidc-cli-client-id",
        "drover-cli",
        "--oidc-group-map",
        "vision-team=vision:member,speech-team=speech:viewer",
        "--oidc-refresh-interval",
        "2s",
        "--oidc-name",
        "Test IdP",
    ]);
    let served = server.wait_for_line("drover server listening on ");
    assert_eq!(served, url);
    let gateway_line = server.wait_for_line("executor gateway listening on ");
    let (gateway, gateway_pin) = Cluster::gateway_line(&gateway_line);
    let cluster = Cluster {
        executors: Vec::new(),
        server,
        database,
        dir,
        url: url.clone(),
        gateway,
        gateway_pin,
        http: http_client(),
        slots: 1,
        executor_env: Vec::new(),
    };

    // Two tenants, each with a job (they stay queued: no executor here).
    for tenant in ["vision", "speech"] {
        cluster
            .post(
                "/api/v1/tenants",
                json!({"name": tenant, "quota": {"guaranteed_gpus": 0}}),
            )
            .await;
        let user = cluster
            .post(
                "/api/v1/users",
                json!({"name": format!("{tenant}-ci"), "tenant": tenant, "role": "member"}),
            )
            .await;
        let token = cluster
            .post(
                "/api/v1/tokens",
                json!({"name": "ci", "user_id": user["user"]["id"]}),
            )
            .await["secret"]
            .as_str()
            .unwrap()
            .to_owned();
        let job = format!(
            "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: {tenant}-job}}\nspec:\n  type: command\n  command: {{argv: [sleep, '1']}}\n  resources: {{workers: {{min: 1, max: 1}}, ps: {{min: 0, max: 0}}, gpus_per_worker: 0, cpus_per_worker: 1}}\n"
        );
        let response = cluster
            .http
            .post(format!("{url}/api/v1/jobs"))
            .bearer_auth(&token)
            .header("content-type", "application/yaml")
            .body(job)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{:?}",
            response.text().await
        );
    }

    // The dashboard in Chromium.
    let shots = repo_root().join("target/dashboard");
    std::fs::create_dir_all(&shots).unwrap();
    let output = node(
        &["sso.mjs", "dashboard"],
        &[
            ("DROVER_URL", url.as_str()),
            ("OIDC_ACCOUNTS", accounts.to_str().unwrap()),
            ("CHROMIUM", chromium.as_str()),
            ("SCREENSHOTS", shots.to_str().unwrap()),
        ],
    );
    assert_passed(&output, "the dashboard's sign-in");
    // What the sign-in did, as the audit log has it.
    let audit = cluster.get("/api/v1/audit").await;
    let actions: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"sso.link"), "{actions:?}");
    // alice lost her tenant with her group; dave's session ended on the provider's refusal alone.
    let unlinked: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "sso.unlink")
        .map(|e| e["target"].as_str().unwrap())
        .collect();
    assert_eq!(unlinked, ["alice"], "{audit}");

    // The CLI: `drover login --sso`, approved in the browser as bob.
    let config = cluster.dir.path().join("cli-config.yaml");
    let mut login = Command::new(drover())
        .args(["login", "--sso", "--server", &url])
        .env("DROVER_CONFIG", &config)
        .env("DROVER_CA_CERT", &test_authority().file)
        .env_remove("DROVER_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(login.stderr.take().unwrap()).lines();
    let verification = after_prefix(&mut stderr, "To sign in, open ", "drover login --sso");
    assert!(
        verification.starts_with(&provider.issuer) && verification.contains("user_code="),
        "{verification}"
    );
    let output = node(
        &["sso.mjs", "device", &verification],
        &[("DEVICE_USER", "bob"), ("CHROMIUM", chromium.as_str())],
    );
    assert_passed(&output, "approving the CLI's sign-in");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = login.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "drover login --sso did not finish"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(login.stdout.as_mut().unwrap(), &mut said).unwrap();
    assert!(status.success(), "drover login --sso failed: {said}");
    assert!(said.contains("as bob (tenant speech)"), "{said}");
    let kept = std::fs::read_to_string(&config).unwrap();
    assert!(kept.contains("refresh-token"), "{kept}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&config).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the context file must be private");
    }

    // Its token lives as long as the refresh interval (2 s): each command after renews it.
    std::thread::sleep(Duration::from_secs(3));
    let (ok, listed, err) = cli_as(&config, &url, &["jobs"]);
    assert!(ok, "drover jobs after sign-in: {err}");
    assert!(listed.contains("speech-job"), "{listed}");
    assert!(!listed.contains("vision-job"), "{listed}");
    let renewed = std::fs::read_to_string(&config).unwrap();
    assert_ne!(renewed, kept, "the token was renewed and kept");
    // A viewer may read but not submit.
    let job_file = cluster.dir.path().join("job.yaml");
    std::fs::write(&job_file, "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: nope}\nspec:\n  type: command\n  command: {argv: [true]}\n  resources: {workers: {min: 1, max: 1}, ps: {min: 0, max: 0}, gpus_per_worker: 0, cpus_per_worker: 1}\n").unwrap();
    let (ok, _, err) = cli_as(&config, &url, &["submit", job_file.to_str().unwrap()]);
    assert!(!ok && err.contains("role"), "a viewer submitted: {err}");

    // bob's group goes: the next renewal is refused, in one line.
    let mut groups: Value =
        serde_json::from_str(&std::fs::read_to_string(&accounts).unwrap()).unwrap();
    groups["bob"]["groups"] = json!([]);
    std::fs::write(&accounts, groups.to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let (ok, _, err) = cli_as(&config, &url, &["jobs"]);
    assert!(!ok, "the CLI kept access after its group went");
    assert!(err.contains("none of your groups"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Tokens the exchange must refuse, each for its reason; then one it must take.
    let now = chrono::Utc::now().timestamp();
    let carol = |aud: &str| json!({"sub": "carol", "aud": aud, "groups": ["vision-team"], "preferred_username": "carol"});
    let forged = signed(&provider.issuer, carol("drover-cli"), "outsider").await;
    let (status, body) = exchange(&cluster, &forged).await;
    assert_eq!(status, 401, "a forged signature: {body}");
    assert_eq!(body["error"]["field"], "id_token", "{body}");
    let other_client = signed(&provider.issuer, carol("drover-dashboard"), "provider").await;
    let (status, body) = exchange(&cluster, &other_client).await;
    assert_eq!(status, 401, "another client's audience: {body}");
    let mut expired = carol("drover-cli");
    expired["iat"] = json!(now - 7200);
    expired["exp"] = json!(now - 3600);
    let expired = signed(&provider.issuer, expired, "provider").await;
    let (status, body) = exchange(&cluster, &expired).await;
    assert_eq!(status, 401, "an expired token: {body}");
    let mut elsewhere = carol("drover-cli");
    elsewhere["iss"] = json!("https://elsewhere.example");
    let elsewhere = signed(&provider.issuer, elsewhere, "provider").await;
    let (status, body) = exchange(&cluster, &elsewhere).await;
    assert_eq!(status, 401, "another issuer: {body}");
    let (status, body) = exchange(&cluster, "not-a-jwt").await;
    assert_eq!(status, 401, "garbage: {body}");
    let good = signed(&provider.issuer, carol("drover-cli"), "provider").await;
    let (status, body) = exchange(&cluster, &good).await;
    assert_eq!(status, 200, "a good token: {body}");
    assert_eq!(body["tenant"], "vision", "{body}");

    // The provider rotates its keys: a token signed with the new key is taken once the server
    // fetches the key set again.
    let rotated: Value = reqwest::Client::new()
        .post(format!("{}/test/rotate", provider.issuer))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kid = rotated["kid"].as_str().unwrap();
    let fresh = signed(&provider.issuer, carol("drover-cli"), kid).await;
    let (status, body) = exchange(&cluster, &fresh).await;
    assert_eq!(status, 200, "a token of the rotated-in key: {body}");
}
