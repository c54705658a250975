//! Signing in and out, the session cookie, CSRF and the open-redirect guard; every page scoped to the
//! caller's tenant and buttons to their role; an unknown page and the favicon.

use super::*;

#[tokio::test]
async fn signing_in_and_out_and_what_a_session_may_do_on_sqlite() {
    signing_in_and_out(Site::on(TestDb::sqlite().await).await).await;
}

#[tokio::test]
async fn signing_in_and_out_and_what_a_session_may_do_on_postgres() {
    signing_in_and_out(Site::on(TestDb::postgres().await).await).await;
}

async fn signing_in_and_out((site, [ada, _, _]): (Site, [String; 3])) {
    let answer = site.get("/jobs?state=queued", "").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location, "/login?next=%2Fjobs%3Fstate%3Dqueued");

    let refused = site.form("/login", None, &[("token", "drv_wrong")]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains("sign-in refused: invalid token"));
    // Never a redirect off the site after signing in.
    for next in [
        "//evil.example/x",
        "https://evil.example",
        "/\\evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "/ /evil.example",
    ] {
        let answer = site
            .form("/login", None, &[("token", &ada), ("next", next)])
            .await;
        assert_eq!(answer.location, "/", "{next}");
    }
    // A sign-in posted from another site is refused.
    let request = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "drover.test")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(format!("token={ada}")))
        .unwrap();
    assert_eq!(site.send(request).await.status, StatusCode::FORBIDDEN);

    let session = site.sign_in(&ada).await;
    for page in [
        "/",
        "/jobs",
        "/experiments",
        "/queue",
        "/nodes",
        "/tenants",
        "/submit",
    ] {
        let answer = site.get(page, &session).await;
        assert_eq!(answer.status, StatusCode::OK, "{page}");
        assert!(answer.body.contains("ada · alpha · member"), "{page}");
    }
    // The leader's records, read back: the round; the tenants' GPU-hours come from the accounting
    // ledger (no allocation yet: none), lent GPUs from the last sample (alpha has no guarantee).
    let overview = site.get("/", &session).await.body;
    assert!(overview.contains("1.2 ms"));
    // CPUs as well as GPUs; on a cluster three minutes old the chart spans the last hour, not a day
    // (in which its samples were a sliver).
    assert!(
        overview.contains("CPUs in use") && overview.contains(r#"id="cpus-in-use">0 / 0<"#),
        "{overview}"
    );
    assert!(
        overview.contains("GPUs over the last hour")
            && overview.contains("GPUs in use and in total over the last hour"),
        "{overview}"
    );
    let tenants = site.get("/tenants", &session).await.body;
    // A member sees neither the tenant form (cluster administrators) nor the users (tenant admins).
    assert!(
        !tenants.contains("id=\"tenant-form\"") && !tenants.contains("id=\"user-form\""),
        "{tenants}"
    );
    assert!(
        tenants.contains("GPU-hours allocated, 7 days")
            && tenants.contains("<td>alpha</td><td>0</td><td>no limit</td><td>v100: at most 4</td><td>0</td><td>0</td><td>0.0</td><td>0.0</td><td>0.0</td><td>0.0</td>"),
        "{tenants}"
    );

    // The cookie reaches the REST API too, but changes nothing without the page's CSRF token.
    let created = site.submit(&session, &JOB.replace("NAME", "mine")).await;
    assert_eq!(created.status, StatusCode::SEE_OTHER, "{}", created.body);
    let job = created.location.trim_start_matches("/jobs/").to_owned();
    let cancel = |csrf: Option<String>| {
        let mut request = Request::post(format!("/api/v1/jobs/{job}/cancel")).header(
            header::COOKIE,
            format!("{}={session}", auth::SESSION_COOKIE),
        );
        if let Some(csrf) = csrf {
            request = request.header(auth::CSRF_HEADER, csrf);
        }
        request.body(Body::empty()).unwrap()
    };
    assert_eq!(site.send(cancel(None)).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        site.send(cancel(Some("0".repeat(32)))).await.status,
        StatusCode::FORBIDDEN
    );
    let cancelled = site.send(cancel(Some(auth::csrf_token(&session)))).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);

    // Signing out revokes the session: the same cookie then leads to the login page.
    let csrf = auth::csrf_token(&session);
    let stale = site
        .form("/logout", Some(&session), &[("_csrf", "nope")])
        .await;
    assert_eq!(stale.status, StatusCode::FORBIDDEN);
    let out = site
        .form("/logout", Some(&session), &[("_csrf", &csrf)])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.cookie.contains("Max-Age=0"));
    let after = site.get("/jobs", &session).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    assert!(after.location.starts_with("/login"), "{}", after.location);

    // Revoking the token a session was opened with ends the session (here revoked in the store, as
    // another replica would: this one sees it once its token cache forgets the session).
    let session = site.sign_in(&ada).await;
    assert_eq!(site.get("/jobs", &session).await.status, StatusCode::OK);
    let record = site
        .store
        .find_token(&tokens::hash_token(&ada))
        .await
        .unwrap()
        .unwrap();
    site.store.revoke_token(record.token.id).await.unwrap();
    tokio::time::sleep(drover_service::TokenCache::TTL + std::time::Duration::from_millis(100))
        .await;
    let after = site.get("/jobs", &session).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    assert!(after.location.starts_with("/login"), "{}", after.location);
}

/// An address no route serves is, for a browser, a page saying so with the way back (it was the
/// API's raw JSON); for the API it stays JSON. The favicon is served.
#[tokio::test]
async fn an_unknown_page_says_so_and_the_favicon_is_served() {
    let (site, _) = Site::new().await;
    let request = |path: &str, accept: &str| {
        Request::get(path)
            .header(header::ACCEPT, accept)
            .body(Body::empty())
            .unwrap()
    };
    let page = site
        .send(request("/no-such-page", "text/html,application/xhtml+xml"))
        .await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(
        page.body.contains("<h1>Not found</h1>") && page.body.contains("href=\"/\""),
        "{}",
        page.body
    );
    let api = site
        .send(request("/api/v1/no-such-thing", "text/html"))
        .await;
    assert_eq!(api.status, StatusCode::NOT_FOUND);
    assert!(api.body.starts_with('{'), "{}", api.body);
    let icon = site.send(request("/static/favicon.svg", "*/*")).await;
    assert_eq!(icon.status, StatusCode::OK);
    assert!(icon.body.starts_with("<svg"), "{}", icon.body);
}

#[tokio::test]
async fn pages_are_scoped_to_the_tenant_and_buttons_to_the_role() {
    let (site, [ada, vic, bob]) = Site::new().await;
    let (ada, vic, bob) = (
        site.sign_in(&ada).await,
        site.sign_in(&vic).await,
        site.sign_in(&bob).await,
    );
    let created = site.submit(&bob, &JOB.replace("NAME", "bobs-job")).await;
    let theirs = created.location.clone();
    let id = theirs.trim_start_matches("/jobs/");
    assert_eq!(site.get(&theirs, &bob).await.status, StatusCode::OK);
    for path in [
        theirs.clone(),
        format!("{theirs}/chart?metrics=loss"),
        format!("{theirs}/live"),
        format!("/submit?from={id}"),
        format!("/api/v1/jobs/{id}/logs"),
    ] {
        let answer = site.get(&path, &ada).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
    }
    assert!(!site.get("/jobs", &ada).await.body.contains("bobs-job"));
    assert!(!site.get("/queue", &ada).await.body.contains("bobs-job"));
    let queue = site.get("/queue", &bob).await.body;
    assert!(
        queue.contains("bobs-job") && queue.contains("not yet considered"),
        "{queue}"
    );
    // Once the leader's round has seen it, the queue gives the policy's reason.
    let job = drover_core::JobId(id.parse().unwrap());
    site.store
        .record_round(&RoundRecord {
            policy: "drover".into(),
            finished_at: chrono::Utc::now(),
            duration_us: 900,
            waiting: vec![drover_store::WaitingJob::new(job, "insufficient_resources")],
            free: None,
        })
        .await
        .unwrap();
    let queue = site.get("/queue", &bob).await.body;
    assert!(
        queue.contains("not enough free GPUs, CPUs or memory"),
        "{queue}"
    );

    // A viewer sees alpha's jobs but no button that would change one; a member sees them.
    let created = site.submit(&ada, &JOB.replace("NAME", "adas-job")).await;
    let page = site.get(&created.location, &vic).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("data-action="),
        "no buttons for a viewer"
    );
    let page = site.get(&created.location, &ada).await;
    for action in ["cancel", "pause"] {
        assert!(
            page.body.contains(&format!("data-action=\"{action}\"")),
            "{action}"
        );
    }
    let refused = site.submit(&vic, &JOB.replace("NAME", "viewers")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
}
