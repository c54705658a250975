//! Regression tests for the holes an outside probe found: token minting across privilege, NUL bytes
//! reaching the database, a cluster administrator's resize checked against the wrong quota, tenant
//! names leaked by status codes, axum's plain-text errors, and the enrolment API's access rules.
//! The limits and the audit log are in `limits.rs`.

use super::{ADMIN_TOKEN, TestApp};
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

/// A command job as JSON, so a test can put any string anywhere in it.
pub(crate) fn command_job(name: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["python3", "-c", "print(1)"], "env": {}},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0}}
        }
    })
}

#[tokio::test]
async fn a_tenant_admin_cannot_act_for_a_cluster_administrator() {
    let app = TestApp::new().await;
    // A tenant admin of `default`, the tenant the bootstrap cluster administrator lives in.
    let ada = app.user_token("default", "ada", "admin").await;
    let root = app.get("/api/v1/me", ADMIN_TOKEN).await;
    let root_id = root.body["user"]["id"].as_str().unwrap().to_owned();

    let minted = app
        .post(
            "/api/v1/tokens",
            &ada,
            json!({"name": "pwn", "user_id": root_id}),
        )
        .await;
    assert_eq!(minted.status, StatusCode::FORBIDDEN, "{}", minted.body);
    assert_eq!(minted.error_field(), "user_id");
    assert!(minted.body.get("secret").is_none());
    let listed = app
        .get(&format!("/api/v1/tokens?user_id={root_id}"), &ada)
        .await;
    assert_eq!(listed.status, StatusCode::FORBIDDEN);
    let root_tokens = app.get("/api/v1/tokens", ADMIN_TOKEN).await;
    let root_token = root_tokens.body["tokens"][0]["id"].as_str().unwrap();
    let revoked = app
        .delete(&format!("/api/v1/tokens/{root_token}"), &ada)
        .await;
    assert_eq!(revoked.status, StatusCode::FORBIDDEN);
    // The administrator's token still works.
    assert_eq!(
        app.get("/api/v1/me", ADMIN_TOKEN).await.status,
        StatusCode::OK
    );

    // What a tenant admin may still do: its own tokens, and those of its tenant's other users.
    let mine = app
        .post("/api/v1/tokens", &ada, json!({"name": "mine"}))
        .await;
    assert_eq!(mine.status, StatusCode::CREATED);
    let carol = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "carol", "role": "member"}),
        )
        .await;
    let carol_id = carol.body["user"]["id"].as_str().unwrap();
    let for_carol = app
        .post(
            "/api/v1/tokens",
            &ada,
            json!({"name": "carol", "user_id": carol_id}),
        )
        .await;
    assert_eq!(for_carol.status, StatusCode::CREATED);
    // Nor for another tenant admin: a peer's token would let it act as the peer.
    let peer = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "peer", "role": "admin"}),
        )
        .await;
    let peer_id = peer.body["user"]["id"].as_str().unwrap();
    let for_peer = app
        .post(
            "/api/v1/tokens",
            &ada,
            json!({"name": "p", "user_id": peer_id}),
        )
        .await;
    assert_eq!(for_peer.status, StatusCode::FORBIDDEN, "{}", for_peer.body);
    // A member cannot mint for anyone else, and is told the user does not exist.
    let carol_token = for_carol.body["secret"].as_str().unwrap();
    let ada_id = app.get("/api/v1/me", &ada).await.body["user"]["id"].clone();
    let up = app
        .post(
            "/api/v1/tokens",
            carol_token,
            json!({"name": "up", "user_id": ada_id}),
        )
        .await;
    assert_eq!(up.status, StatusCode::NOT_FOUND);
    // A cluster administrator still mints for anyone.
    let by_root = app
        .post(
            "/api/v1/tokens",
            ADMIN_TOKEN,
            json!({"name": "x", "user_id": ada_id}),
        )
        .await;
    assert_eq!(by_root.status, StatusCode::CREATED);
}

/// Puts a NUL somewhere in a job document.
type Poison = fn(&mut Value);

#[tokio::test]
async fn nul_characters_are_refused_with_their_field() {
    let app = TestApp::new().await;
    let cases: [(&str, Poison); 6] = [
        ("spec.command.argv[1]", |j| {
            j["spec"]["command"]["argv"][1] = json!("-c\u{0}")
        }),
        ("spec.command.env.TOKEN", |j| {
            j["spec"]["command"]["env"]["TOKEN"] = json!("a\u{0}b")
        }),
        ("metadata.annotations.note", |j| {
            j["metadata"]["annotations"] = json!({"note": "\u{0}"})
        }),
        ("metadata.namespace", |j| {
            j["metadata"]["namespace"] = json!("team\u{0}")
        }),
        ("spec.command.workdir", |j| {
            j["spec"]["command"]["workdir"] = json!("/tmp/\u{0}")
        }),
        ("metadata.labels.team\\u0000", |j| {
            j["metadata"]["labels"] = json!({"team\u{0}": "x"})
        }),
    ];
    for (i, (field, poison)) in cases.into_iter().enumerate() {
        let mut job = command_job(&format!("nul-{i}"));
        poison(&mut job);
        let reply = app.post("/api/v1/jobs", ADMIN_TOKEN, job).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {}",
            reply.body
        );
        assert_eq!(reply.error_field(), field);
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("NUL")
        );
    }
    assert_eq!(app.job_count().await, 0, "nothing is stored");

    let token = app
        .post("/api/v1/tokens", ADMIN_TOKEN, json!({"name": "ci\u{0}"}))
        .await;
    assert_eq!(
        (token.status, token.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "name")
    );
    let tenant = app
        .post("/api/v1/tenants", ADMIN_TOKEN, json!({"name": "a\u{0}"}))
        .await;
    assert!(tenant.status.is_client_error(), "{}", tenant.body);
    let query = app.get("/api/v1/jobs?label=team%3Dx%00", ADMIN_TOKEN).await;
    assert_eq!(
        (query.status, query.error_field()),
        (StatusCode::BAD_REQUEST, "label")
    );
    let path = app.get("/api/v1/tenants/a%00b", ADMIN_TOKEN).await;
    assert_eq!(
        (path.status, path.error_field()),
        (StatusCode::BAD_REQUEST, "(path)")
    );
    // A literal backslash-u is only text.
    let mut literal = command_job("literal");
    literal["spec"]["command"]["argv"][2] = json!("print('\\u0000')");
    let stored = app.post("/api/v1/jobs", ADMIN_TOKEN, literal).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
}

#[tokio::test]
async fn a_resize_is_checked_against_the_jobs_tenant_quota() {
    let app = TestApp::new().await;
    let alice = app.user_token("vision", "alice", "member").await;
    let quota = app
        .call(
            Method::PUT,
            "/api/v1/tenants/vision/quota",
            Some(ADMIN_TOKEN),
            Some((
                "application/json",
                br#"{"guaranteed_gpus": 1, "max_gpus": 2}"#.to_vec(),
            )),
            &[],
        )
        .await;
    assert_eq!(quota.status, StatusCode::OK, "{}", quota.body);
    let job = app.post("/api/v1/jobs", &alice, command_job("small")).await;
    let id = job.body["job"]["id"].as_str().unwrap();
    // The administrator's own tenant has no ceiling; vision's is 2 GPUs.
    let resized = app
        .post(
            &format!("/api/v1/jobs/{id}/resize"),
            ADMIN_TOKEN,
            json!({"workers": {"min": 4, "max": 4}, "ps": {"min": 1, "max": 1}}),
        )
        .await;
    assert_eq!(
        resized.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        resized.body
    );
    assert_eq!(resized.error_field(), "spec.resources.workers.min");
    assert!(
        resized.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`vision`")
    );
    let unchanged = app.get(&format!("/api/v1/jobs/{id}"), &alice).await;
    assert_eq!(
        unchanged.body["job"]["spec"]["spec"]["resources"]["workers"]["min"],
        1
    );
}

#[tokio::test]
async fn other_tenants_are_refused_alike_whether_they_exist_or_not() {
    let app = TestApp::new().await;
    let alice = app.user_token("vision", "alice", "member").await;
    let ada = app.user_token("vision", "ada", "admin").await;
    app.user_token("nlp", "nick", "member").await;
    let exists = app.get("/api/v1/jobs?tenant=nlp", &alice).await;
    let missing = app.get("/api/v1/jobs?tenant=no-such-team", &alice).await;
    assert_eq!(exists.status, StatusCode::FORBIDDEN);
    assert_eq!(
        (exists.status, exists.error_field()),
        (missing.status, missing.error_field())
    );
    let own = app.get("/api/v1/jobs?tenant=vision", &alice).await;
    assert_eq!(own.status, StatusCode::OK);
    let user_exists = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "x", "role": "member", "tenant": "nlp"}),
        )
        .await;
    let user_missing = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "x", "role": "member", "tenant": "nope"}),
        )
        .await;
    assert_eq!(user_exists.status, StatusCode::FORBIDDEN);
    assert_eq!(user_exists.status, user_missing.status);
    // A cluster administrator is told the truth.
    let admin_missing = app
        .get("/api/v1/jobs?tenant=no-such-team", ADMIN_TOKEN)
        .await;
    assert_eq!(admin_missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn badly_encoded_paths_get_the_apis_json_error() {
    let app = TestApp::new().await;
    for uri in [
        "/api/v1/jobs/%FF",
        "/api/v1/tenants/%FF%FE",
        "/api/v1/jobs/%FF/checkpoints/%FF/download",
        "/api/v1/nodes/%C3%28/cordon",
    ] {
        let method = if uri.ends_with("cordon") {
            Method::POST
        } else {
            Method::GET
        };
        let reply = app.call(method, uri, Some(ADMIN_TOKEN), None, &[]).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{uri}: {}",
            reply.body
        );
        assert_eq!(reply.error_code(), "bad_request", "{uri}");
        assert_eq!(reply.error_field(), "(path)", "{uri}");
    }
}

#[tokio::test]
async fn only_cluster_administrators_manage_enrolment() {
    let app = TestApp::new().await;
    let ada = app.user_token("vision", "ada", "admin").await;
    let refused = app
        .post("/api/v1/enrollment-tokens", &ada, json!({"name": "rack"}))
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        app.get("/api/v1/enrollment-tokens", &ada).await.status,
        StatusCode::FORBIDDEN
    );
    let revoke = app
        .post("/api/v1/nodes/gpu-01/revoke", &ada, json!({}))
        .await;
    assert_eq!(revoke.status, StatusCode::FORBIDDEN);

    let bad = app
        .post(
            "/api/v1/enrollment-tokens",
            ADMIN_TOKEN,
            json!({"name": "rack", "uses": 0}),
        )
        .await;
    assert_eq!(
        (bad.status, bad.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "uses")
    );
    let created = app
        .post(
            "/api/v1/enrollment-tokens",
            ADMIN_TOKEN,
            json!({"name": "rack", "uses": 3, "expires_in": "1h"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let secret = created.body["secret"].as_str().unwrap();
    assert!(secret.starts_with("dre_"));
    assert_eq!(created.body["enrollment_token"]["uses_left"], 3);
    let listed = app.get("/api/v1/enrollment-tokens", ADMIN_TOKEN).await;
    assert!(
        !listed.body.to_string().contains(secret),
        "a listing shows a secret"
    );
    let id = created.body["enrollment_token"]["id"].as_str().unwrap();
    let revoked = app
        .delete(&format!("/api/v1/enrollment-tokens/{id}"), ADMIN_TOKEN)
        .await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert!(revoked.body["enrollment_token"]["revoked_at"].is_string());
    let unknown = app
        .post("/api/v1/nodes/never-seen/revoke", ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

/// Revoking a token revokes the tokens minted with it, and theirs: a token minted from a stolen
/// token, or one that minted another before it was revoked, stops working with it.
#[tokio::test]
async fn revoking_a_token_revokes_what_was_minted_with_it() {
    let app = TestApp::new().await;
    let minted = |reply: &super::Reply| -> (String, String) {
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        (
            reply.body["token"]["id"].as_str().unwrap().to_owned(),
            reply.body["secret"].as_str().unwrap().to_owned(),
        )
    };
    let (parent_id, parent) = minted(
        &app.post("/api/v1/tokens", ADMIN_TOKEN, json!({"name": "ci"}))
            .await,
    );
    let (_, child) = minted(
        &app.post("/api/v1/tokens", &parent, json!({"name": "from ci"}))
            .await,
    );
    let (_, grandchild) = minted(
        &app.post("/api/v1/tokens", &child, json!({"name": "deeper"}))
            .await,
    );
    assert_eq!(
        app.get("/api/v1/me", &grandchild).await.status,
        StatusCode::OK
    );
    let revoked = app
        .delete(&format!("/api/v1/tokens/{parent_id}"), ADMIN_TOKEN)
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    for token in [&parent, &child, &grandchild] {
        let reply = app.get("/api/v1/me", token).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
        assert_eq!(reply.body["error"]["message"], "this token was revoked");
    }
    assert_eq!(
        app.get("/api/v1/me", ADMIN_TOKEN).await.status,
        StatusCode::OK
    );
}
