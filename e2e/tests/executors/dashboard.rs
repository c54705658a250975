//! The dashboard in a real browser: Debian's Chromium, driven by playwright-core
//! (`e2e/browser/dashboard.mjs`), against a real server with two executors on Postgres. The script
//! signs in, submits and follows a job, cancels and resizes others, checks that a second tenant's
//! user is refused the first tenant's pages, runs axe-core on every page and leaves screenshots in
//! `target/dashboard/`. `scripts/test` installs Chromium and the script's packages; without them
//! this test fails and says how to get them (`DROVER_BROWSER_TESTS=skip` skips it knowingly).

use super::harness::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// Chromium as Debian installs it, or where `CHROMIUM` says.
fn chromium() -> Option<String> {
    std::env::var("CHROMIUM").ok().or_else(|| {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .find(|p| Path::new(p).exists())
            .map(|p| (*p).to_owned())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    if std::env::var("DROVER_BROWSER_TESTS").as_deref() == Ok("skip") {
        skip(
            "dashboard::the_dashboard_works_in_a_real_browser",
            "DROVER_BROWSER_TESTS=skip",
        );
        return;
    }
    let root = repo_root();
    let browser_dir = root.join("e2e/browser");
    let chromium = chromium().expect(
        "no Chromium: run scripts/test (it installs Debian's chromium), or set CHROMIUM, \
         or DROVER_BROWSER_TESTS=skip",
    );
    assert!(
        browser_dir.join("node_modules/playwright-core").exists(),
        "e2e/browser has no node_modules: run scripts/test, or `npm ci` in e2e/browser"
    );

    let cluster = Cluster::start().await;
    // A second tenant with a member, and a job of theirs whose pages the admin's tenant must not
    // reach from their side (and the other way round).
    cluster
        .post(
            "/api/v1/tenants",
            json!({"name": "other", "quota": {"guaranteed_gpus": 0}}),
        )
        .await;
    let user = cluster
        .post(
            "/api/v1/users",
            json!({"name": "olga", "tenant": "other", "role": "member"}),
        )
        .await;
    let token = cluster
        .post(
            "/api/v1/tokens",
            json!({"name": "browser", "user_id": user["user"]["id"]}),
        )
        .await;
    let other_token = token["secret"].as_str().unwrap().to_owned();

    let screenshots = root.join("target/dashboard");
    std::fs::create_dir_all(&screenshots).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("dashboard.mjs")
            .current_dir(&browser_dir)
            .env("DROVER_URL", &cluster.url)
            // The server is HTTPS with the test authority's certificate: Node's fetch trusts it
            // through this, the browser contexts ignore certificate errors.
            .env("NODE_EXTRA_CA_CERTS", &test_authority().file)
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env("OTHER_TOKEN", &other_token)
            .env("CHROMIUM", chromium)
            .env("SCREENSHOTS", &screenshots)
            .output()
            .map(|output| (output, cluster))
    })
    .await
    .unwrap()
    .expect("cannot run node: install Node.js 20 or later");
    let (output, _cluster) = output;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    // The script's stdout is printed above; the failure says where it stopped (its stderr) first.
    assert!(
        output.status.success(),
        "the browser script failed:\n{stderr}\nits last steps:\n{}",
        last_lines(&stdout, 5)
    );
    assert!(stdout.contains("dashboard: all checks passed"), "{stdout}");
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
