//! Tenancy through the API: members see and change only their tenant's jobs and viewers only read,
//! tenant admins manage only their own users, and tenants with their quotas.

use super::*;

#[tokio::test]
async fn members_see_and_change_only_their_tenant_and_viewers_only_read() {
    let app = TestApp::new().await;
    let alice = app.user_token("vision", "alice", "member").await;
    let bob = app.user_token("nlp", "bob", "member").await;
    let victor = app.user_token("vision", "victor", "viewer").await;
    let job = app.submit_yaml(&alice, EXAMPLE).await;
    assert_eq!(job.status, StatusCode::CREATED);
    assert_eq!(job.body["job"]["tenant"], "vision");
    let id = job.body["job"]["id"].as_str().unwrap();
    let job_uri = format!("/api/v1/jobs/{id}");

    // Another tenant's member: the job does not exist for them.
    assert_eq!(app.get(&job_uri, &bob).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        app.get(&format!("{job_uri}/events"), &bob).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.post(&format!("{job_uri}/cancel"), &bob, json!({}))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert!(
        app.get("/api/v1/jobs", &bob).await.body["jobs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let other_tenant = app.get("/api/v1/jobs?tenant=vision", &bob).await;
    assert_eq!(
        (other_tenant.status, other_tenant.error_field()),
        (StatusCode::FORBIDDEN, "tenant")
    );
    assert_eq!(
        app.get("/api/v1/tenants/vision", &bob).await.status,
        StatusCode::NOT_FOUND
    );
    // The same name in another tenant is fine.
    assert_eq!(
        app.submit_yaml(&bob, EXAMPLE).await.status,
        StatusCode::CREATED
    );

    // A viewer reads but changes nothing.
    assert_eq!(app.get(&job_uri, &victor).await.status, StatusCode::OK);
    assert_eq!(
        app.get("/api/v1/jobs", &victor).await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let submit = app.submit_yaml(&victor, &named("viewer-job")).await;
    assert_eq!(
        (submit.status, submit.error_code()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    assert_eq!(
        app.post(&format!("{job_uri}/cancel"), &victor, json!({}))
            .await
            .status,
        StatusCode::FORBIDDEN
    );

    // Members cannot administer.
    assert_eq!(
        app.post("/api/v1/tenants", &alice, json!({"name": "mine"}))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.post(
            "/api/v1/users",
            &alice,
            json!({"name": "eve", "role": "member"})
        )
        .await
        .status,
        StatusCode::FORBIDDEN
    );
    let quota = app
        .call(
            Method::PUT,
            "/api/v1/tenants/vision/quota",
            Some(&alice),
            Some(("application/json", b"{\"guaranteed_gpus\": 100}".to_vec())),
            &[],
        )
        .await;
    assert_eq!(quota.status, StatusCode::FORBIDDEN);

    // The cluster administrator sees both tenants and can narrow to one.
    assert_eq!(
        app.get("/api/v1/jobs", ADMIN_TOKEN).await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        app.get("/api/v1/jobs?tenant=nlp", ADMIN_TOKEN).await.body["jobs"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app.post(&format!("{job_uri}/cancel"), &alice, json!({}))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn tenant_admins_manage_their_own_users_only() {
    let app = TestApp::new().await;
    let ada = app.user_token("vision", "ada", "admin").await;
    app.user_token("nlp", "nick", "member").await;
    let made = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "carol", "role": "viewer"}),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    assert_eq!(made.body["user"]["tenant"], "vision");
    let elsewhere = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "dan", "role": "member", "tenant": "nlp"}),
        )
        .await;
    assert_eq!(elsewhere.status, StatusCode::FORBIDDEN);
    let escalate = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "root2", "role": "admin", "cluster_admin": true}),
        )
        .await;
    assert_eq!(escalate.status, StatusCode::FORBIDDEN);
    let twin = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "carol", "role": "viewer"}),
        )
        .await;
    assert_eq!(twin.status, StatusCode::CONFLICT);
    let bad_role = app
        .post("/api/v1/users", &ada, json!({"name": "x", "role": "owner"}))
        .await;
    assert_eq!(
        (bad_role.status, bad_role.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "role")
    );
    let users = app.get("/api/v1/users", &ada).await;
    let names: Vec<&str> = users.body["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ada", "carol"]);
    // A token for carol, made by her tenant admin, works as carol.
    let carol_id = made.body["user"]["id"].as_str().unwrap();
    let token = app
        .post(
            "/api/v1/tokens",
            &ada,
            json!({"name": "carol", "user_id": carol_id}),
        )
        .await;
    let me = app
        .get("/api/v1/me", token.body["secret"].as_str().unwrap())
        .await;
    assert_eq!(me.body["user"]["name"], "carol");
}

#[tokio::test]
async fn tenants_and_quotas() {
    let app = TestApp::new().await;
    let created = app
        .post(
            "/api/v1/tenants",
            ADMIN_TOKEN,
            json!({"name": "vision", "quota": {"guaranteed_gpus": 2, "max_gpus": 2}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.body["tenant"]["quota"]["max_gpus"], 2);
    for (body, field) in [
        (json!({"name": "Bad_Name"}), "name"),
        (
            json!({"name": "ok", "quota": {"guaranteed_gpus": 4, "max_gpus": 2}}),
            "quota.max_gpus",
        ),
        (
            json!({"name": "ok", "quota": {"guaranteed_gpus": -1}}),
            "quota.guaranteed_gpus",
        ),
        (json!({"name": "ok", "colour": "red"}), "colour"),
    ] {
        let reply = app.post("/api/v1/tenants", ADMIN_TOKEN, body).await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (StatusCode::UNPROCESSABLE_ENTITY, field),
            "{}",
            reply.body
        );
    }
    let twin = app
        .post("/api/v1/tenants", ADMIN_TOKEN, json!({"name": "vision"}))
        .await;
    assert_eq!(twin.status, StatusCode::CONFLICT);
    // A job that needs more GPUs than the tenant may ever hold is refused up front.
    let alice = app.user_token("vision", "alice", "member").await;
    let greedy = app
        .submit_yaml(
            &alice,
            &EXAMPLE.replace("workers: {min: 1, max: 4}", "workers: {min: 4, max: 4}"),
        )
        .await;
    assert_eq!(
        (greedy.status, greedy.error_field()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.workers.min"
        )
    );
    let raised = app
        .call(
            Method::PUT,
            "/api/v1/tenants/vision/quota",
            Some(ADMIN_TOKEN),
            Some((
                "application/json",
                b"{\"guaranteed_gpus\": 2, \"max_gpus\": 8}".to_vec(),
            )),
            &[],
        )
        .await;
    assert_eq!(raised.status, StatusCode::OK, "{}", raised.body);
    let fits = app
        .submit_yaml(
            &alice,
            &EXAMPLE.replace("workers: {min: 1, max: 4}", "workers: {min: 4, max: 4}"),
        )
        .await;
    assert_eq!(fits.status, StatusCode::CREATED);
    let malformed = app
        .call(
            Method::PUT,
            "/api/v1/tenants/vision/quota",
            Some(ADMIN_TOKEN),
            Some(("application/json", b"{\"guaranteed_gpus\": ".to_vec())),
            &[],
        )
        .await;
    assert_eq!(
        (malformed.status, malformed.error_code()),
        (StatusCode::BAD_REQUEST, "malformed_body")
    );
}

#[tokio::test]
async fn quotas_per_gpu_model() {
    let app = TestApp::new().await;
    let quota = json!({"guaranteed_gpus": 4, "max_gpus": 8, "flavours": [
        {"gpu_model": "v100", "guaranteed_gpus": 2, "max_gpus": 2, "lending_limit": 1},
        {"gpu_model": "K80", "max_gpus": 6}]});
    let created = app
        .post(
            "/api/v1/tenants",
            ADMIN_TOKEN,
            json!({"name": "vision", "quota": quota}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let flavours = &created.body["tenant"]["quota"]["flavours"];
    assert_eq!(flavours[0]["gpu_model"], "v100");
    assert_eq!(flavours[0]["lending_limit"], 1);
    assert_eq!(flavours[1]["guaranteed_gpus"], 0);
    let read = app.get("/api/v1/tenants/vision", ADMIN_TOKEN).await;
    assert_eq!(
        read.body["tenant"]["quota"],
        created.body["tenant"]["quota"]
    );
    let flavoured =
        |flavours: Value| json!({"guaranteed_gpus": 4, "max_gpus": 8, "flavours": flavours});
    for (body, field) in [
        (
            flavoured(json!([{"gpu_model": "v100"}, {"gpu_model": "V100"}])),
            "flavours[1].gpu_model",
        ),
        (
            flavoured(json!([{"gpu_model": " "}])),
            "flavours[0].gpu_model",
        ),
        (
            flavoured(json!([{"gpu_model": "v100", "guaranteed_gpus": 3, "max_gpus": 2}])),
            "flavours[0].max_gpus",
        ),
        (
            flavoured(json!([{"gpu_model": "v100", "guaranteed_gpus": 1, "lending_limit": 2}])),
            "flavours[0].lending_limit",
        ),
        (
            flavoured(json!([{"gpu_model": "v100", "guaranteed_gpus": 3},
                             {"gpu_model": "k80", "guaranteed_gpus": 2}])),
            "flavours",
        ),
        (
            flavoured(json!([{"gpu_model": "v100", "nominal": 3}])),
            "flavours[0]",
        ),
    ] {
        let reply = app
            .call(
                Method::PUT,
                "/api/v1/tenants/vision/quota",
                Some(ADMIN_TOKEN),
                Some(("application/json", body.to_string().into_bytes())),
                &[],
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.body
        );
        assert!(
            reply.error_field().starts_with(field),
            "{field}: {}",
            reply.body
        );
    }
    // Unchanged by the refusals.
    let read = app.get("/api/v1/tenants/vision", ADMIN_TOKEN).await;
    assert_eq!(
        read.body["tenant"]["quota"],
        created.body["tenant"]["quota"]
    );
    // A job that runs only on V100s and needs more of them than the tenant may hold is refused.
    let alice = app.user_token("vision", "alice", "member").await;
    let greedy = app
        .submit_yaml(
            &alice,
            &EXAMPLE
                .replace("workers: {min: 1, max: 4}", "workers: {min: 4, max: 4}")
                .replace(
                    "gpus_per_worker: 1",
                    "gpus_per_worker: 1\n    gpu_types: [v100]",
                ),
        )
        .await;
    assert_eq!(
        (greedy.status, greedy.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "spec.resources.gpu_types"),
        "{}",
        greedy.body
    );
    assert!(
        greedy.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("v100: 2"),
        "{}",
        greedy.body
    );
}
