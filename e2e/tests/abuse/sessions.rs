//! Revocation reaches what a token made (issue #50, item 5), against a real server: a member signs
//! in to the dashboard with a token, mints a token with it and another with that one; once the first
//! token is revoked, none of them works and the dashboard session is over, even for minting a token
//! with the session's cookie (a session used to outlive its token, and mint new ones).

use crate::rest::Rest;
use reqwest::{Method, StatusCode, header};
use serde_json::json;
use std::time::Duration;

const ADMIN: &str = crate::ADMIN;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_dashboard_session_and_the_tokens_minted_with_it() {
    let server = crate::server(4096);
    let rest = Rest::new(&server.url);
    let stolen = rest
        .user_token(ADMIN, "victims", json!({}), "vic", "member")
        .await;
    // A dashboard session opened with the token.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = browser
        .post(format!("{}/login", server.url))
        .form(&[("token", stolen.as_str()), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("drover_session="))
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = |path: &'static str| {
        let browser = browser.clone();
        let cookie = cookie.clone();
        let url = server.url.clone();
        async move {
            browser
                .get(format!("{url}{path}"))
                .header(header::COOKIE, cookie)
                .send()
                .await
                .unwrap()
        }
    };
    let jobs = page("/jobs").await;
    assert_eq!(jobs.status(), StatusCode::OK);
    let html = jobs.text().await.unwrap();
    let csrf = html
        .split("data-csrf=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's CSRF token")
        .to_owned();
    let mint_with_cookie = async || {
        browser
            .post(format!("{}/api/v1/tokens", server.url))
            .header(header::COOKIE, cookie.clone())
            .header("x-csrf-token", csrf.clone())
            .json(&json!({"name": "from-the-session"}))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(mint_with_cookie().await, StatusCode::CREATED);

    // Tokens minted with it, two deep.
    let minted = rest
        .ok(
            Method::POST,
            "/api/v1/tokens",
            &stolen,
            Some(json!({"name": "minted"})),
        )
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let grandchild = rest
        .ok(
            Method::POST,
            "/api/v1/tokens",
            &minted,
            Some(json!({"name": "minted-again"})),
        )
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    for token in [&stolen, &minted, &grandchild] {
        assert_eq!(
            rest.call(Method::GET, "/api/v1/me", token, None).await.0,
            StatusCode::OK
        );
    }

    // The owner revokes the token (found by its prefix in their list).
    let listed = rest.ok(Method::GET, "/api/v1/tokens", &stolen, None).await;
    let id = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| stolen.starts_with(t["prefix"].as_str().unwrap()) && t["name"] == "vic")
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .expect("the token in its owner's list");
    rest.ok(Method::DELETE, &format!("/api/v1/tokens/{id}"), ADMIN, None)
        .await;
    // Within the token cache's lifetime on any replica; this server forgets at once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for token in [&stolen, &minted, &grandchild] {
        let (status, body) = rest.call(Method::GET, "/api/v1/me", token, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let after = page("/jobs").await;
    assert_eq!(after.status(), StatusCode::SEE_OTHER);
    let location = after.headers()[header::LOCATION].to_str().unwrap();
    assert!(location.starts_with("/login"), "{location}");
    assert_eq!(mint_with_cookie().await, StatusCode::UNAUTHORIZED);
}
