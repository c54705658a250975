//! The dashboard driven in-process (the whole HTTP application with `oneshot`) on a real SQLite
//! store: sign-in and its session cookie, CSRF, the open-redirect guard, tenant scoping of every
//! page, roles hiding buttons, the submit form's field errors, and sign-out. The real browser test
//! is `e2e/dashboard.rs`.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use drover_api::auth;
use drover_api::state::AppState;
use drover_core::Role;
use drover_store::testing::TestDb;
use drover_store::tokens;
use drover_store::{GpuUsage, NewTenant, NewToken, NewUser, Quota, RoundRecord};
use http_body_util::BodyExt;
use tower::ServiceExt;

struct Site {
    _db: TestDb,
    store: std::sync::Arc<dyn drover_store::Store>,
    app: Router,
}

/// Where the link whose text starts at `text` in `body` leads (the `href` before it, unescaped).
fn link_to(body: &str, text: &str) -> String {
    let end = body
        .find(text)
        .unwrap_or_else(|| panic!("no `{text}`: {body}"));
    let start = body[..end].rfind("href=\"").unwrap() + 6;
    body[start..end]
        .split('"')
        .next()
        .unwrap()
        .replace("&#38;", "&")
}

/// The job a submission's redirect (`/jobs/{id}`) names.
fn job_of(answer: &Answer) -> drover_core::JobId {
    drover_core::JobId(
        answer
            .location
            .trim_start_matches("/jobs/")
            .parse()
            .unwrap(),
    )
}

struct Answer {
    status: StatusCode,
    location: String,
    cookie: String,
    body: String,
}

impl Site {
    async fn new() -> (Site, [String; 3]) {
        Site::on(TestDb::sqlite().await).await
    }

    async fn on(db: TestDb) -> (Site, [String; 3]) {
        let store = db.store.clone();
        // What the leader records, so that the overview, queue and tenants pages read it back.
        let now = chrono::Utc::now();
        for minutes in [3, 2, 1] {
            let usage = GpuUsage {
                at: now - chrono::Duration::minutes(minutes),
                total: 8,
                allocated: 4,
                running: 3,
                by_tenant: [("alpha".to_owned(), 4)].into(),
            };
            store
                .record_gpu_usage(&usage, now - chrono::Duration::days(8))
                .await
                .unwrap();
        }
        store
            .record_round(&RoundRecord {
                policy: "drover".into(),
                finished_at: now,
                duration_us: 1234,
                waiting: Vec::new(),
                free: None,
            })
            .await
            .unwrap();
        let mut tokens = Vec::new();
        for (tenant, user, role) in [
            ("alpha", "ada", Role::Member),
            ("alpha", "vic", Role::Viewer),
            ("beta", "bob", Role::Member),
        ] {
            let tenant = match store.get_tenant_by_name(tenant).await {
                Ok(t) => t,
                Err(_) => store
                    .create_tenant(&NewTenant {
                        name: tenant.into(),
                        // Alpha may hold 4 V100s at most.
                        quota: Quota {
                            flavours: (tenant == "alpha")
                                .then(|| drover_store::FlavourQuota {
                                    gpu_model: "v100".into(),
                                    guaranteed_gpus: 0,
                                    max_gpus: Some(4),
                                    lending_limit: None,
                                })
                                .into_iter()
                                .collect(),
                            ..Quota::default()
                        },
                    })
                    .await
                    .unwrap(),
            };
            let user = store
                .create_user(&NewUser {
                    tenant_id: tenant.id,
                    name: user.into(),
                    role,
                    cluster_admin: false,
                })
                .await
                .unwrap();
            let token = tokens::generate_token();
            store
                .create_token(&NewToken {
                    user_id: user.id,
                    name: "test".into(),
                    token_hash: tokens::hash_token(&token),
                    prefix: tokens::display_prefix(&token),
                    expires_at: None,
                    parent: None,
                })
                .await
                .unwrap();
            tokens.push(token);
        }
        let state = AppState::new(store, 1 << 20);
        let app = drover_api::routes::app_with(state, drover_web::router());
        let store = db.store.clone();
        (
            Site {
                _db: db,
                store,
                app,
            },
            tokens.try_into().unwrap(),
        )
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let header = |name| {
            response
                .headers()
                .get(name)
                .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        let (location, cookie) = (header(header::LOCATION), header(header::SET_COOKIE));
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            location,
            cookie,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// A GET of `path` in `session`.
    fn request(path: &str, session: &str) -> Request<Body> {
        Request::get(path)
            .header(
                header::COOKIE,
                format!("{}={session}", auth::SESSION_COOKIE),
            )
            .body(Body::empty())
            .unwrap()
    }

    async fn get(&self, path: &str, session: &str) -> Answer {
        self.send(Self::request(path, session)).await
    }

    /// Starts generation 1 of `job` on one GPU of `node-0` (what the scheduler would record).
    async fn start(&self, job: drover_core::JobId) -> u64 {
        let change = drover_store::StateChange {
            to: drover_core::JobState::Starting,
            reason: drover_core::ReasonCode::Allocated,
            message: "test".into(),
            actor: None,
        };
        let task = drover_store::NewTask {
            role: drover_store::TaskRole::Worker,
            index: 0,
            node_name: "node-0".into(),
            gpus: vec![0],
            cpus: 1,
        };
        self.store
            .start_generation(job, &[task], &change)
            .await
            .unwrap()
            .unwrap()
    }

    /// [`Site::start`], and the key of the one task it started (worker 0).
    async fn start_worker(&self, job: drover_core::JobId) -> drover_store::TaskKey {
        drover_store::TaskKey {
            job_id: job,
            generation: self.start(job).await,
            role: drover_store::TaskRole::Worker,
            index: 0,
        }
    }

    /// The first event of the stream at `path` (a live page's), as text.
    async fn first_event(&self, path: &str, session: &str) -> String {
        let response = self
            .app
            .clone()
            .oneshot(Self::request(path, session))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let mut body = response.into_body();
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .expect("the stream sent nothing")
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned()
    }

    async fn form(&self, path: &str, session: Option<&str>, form: &[(&str, &str)]) -> Answer {
        let mut request = Request::post(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::HOST, "drover.test");
        if let Some(session) = session {
            request = request.header(
                header::COOKIE,
                format!("{}={session}", auth::SESSION_COOKIE),
            );
        }
        let body = serde_urlencoded::to_string(form).unwrap();
        self.send(request.body(Body::from(body)).unwrap()).await
    }

    /// Signs in with `token`; the session token from the cookie.
    async fn sign_in(&self, token: &str) -> String {
        let answer = self
            .form("/login", None, &[("token", token), ("next", "/jobs")])
            .await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        assert_eq!(answer.location, "/jobs");
        assert!(answer.cookie.contains("HttpOnly"), "{}", answer.cookie);
        assert!(
            answer.cookie.contains("SameSite=Strict"),
            "{}",
            answer.cookie
        );
        let session = answer
            .cookie
            .split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_owned();
        assert_ne!(
            session, token,
            "the browser gets a session token of its own"
        );
        session
    }

    async fn submit(&self, session: &str, document: &str) -> Answer {
        let csrf = auth::csrf_token(session);
        self.form(
            "/submit",
            Some(session),
            &[("_csrf", &csrf), ("document", document)],
        )
        .await
    }
}

const JOB: &str = "apiVersion: drover.dev/v1
kind: DroverJob
metadata: {name: NAME}
spec:
  type: command
  command: {argv: [sleep, '60']}
  resources:
    workers: {min: 1, max: 1}
    ps: {min: 0, max: 0}
    gpus_per_worker: 1
";

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

/// The queue (issue #53): a job no node can ever hold says so with the numbers (not "lower
/// priority" and "beyond 30 days"); a job behind others says how many are ahead, not "lower
/// priority" when nobody's priority differs; no start is shown in the past or before a job of the
/// same size ahead; the page says how many jobs it shows, and a waiting job's own page shows its
/// place. Each check fails on the dashboard before this change.
#[tokio::test]
async fn the_queue_says_why_where_and_when() {
    let (site, [_, _, bob]) = Site::new().await;
    let bob = site.sign_in(&bob).await;
    // Submitted before any node registered (nothing is refused then); then a 2-GPU node comes.
    let huge = JOB
        .replace("NAME", "huge")
        .replace("gpus_per_worker: 1", "gpus_per_worker: 3");
    let huge = job_of(&site.submit(&bob, &huge).await);
    let first = job_of(&site.submit(&bob, &JOB.replace("NAME", "first")).await);
    let second = job_of(&site.submit(&bob, &JOB.replace("NAME", "second")).await);
    let now = chrono::Utc::now();
    site.store
        .upsert_node(&drover_store::Node {
            id: uuid::Uuid::now_v7(),
            name: "gpu-a".into(),
            labels: Default::default(),
            gpus: (0..2)
                .map(|index| drover_store::Gpu {
                    index,
                    model: "demo".into(),
                    memory_gb: 16.0,
                })
                .collect(),
            cpus: 8,
            memory_gb: 64,
            health: "healthy".into(),
            cordoned: false,
            draining: false,
            gpu_source: "demo".into(),
            isolation: "none".into(),
            runs_images: false,
            taints: Vec::new(),
            last_heartbeat_at: Some(now),
            created_at: now,
        })
        .await
        .unwrap();
    // The leader's round and forecast: the huge job is in neither (it never fits); the second
    // job, of the first's size, was forecast before the first (a head forecast newer than the
    // rest's), and the first's start has passed.
    site.store
        .record_round(&RoundRecord {
            policy: "drover".into(),
            finished_at: now,
            duration_us: 900,
            waiting: [first, second]
                .into_iter()
                .map(|job| drover_store::WaitingJob {
                    needs: Some(drover_store::Needs {
                        gpus: 2,
                        cpus: 2,
                        memory_gb: 4,
                    }),
                    ..drover_store::WaitingJob::new(job, "lower_priority")
                })
                .collect(),
            // One of the node's two GPUs free once the round's plan was carried out.
            free: Some(drover_store::RoundFree {
                gpus: 1,
                total_gpus: 2,
                cpus: 6,
                total_cpus: 8,
                memory_gb: 60,
            }),
        })
        .await
        .unwrap();
    let entry = |job, position, minutes: i64| drover_store::QueueEntry {
        job,
        position,
        reason: "lower_priority".into(),
        start: Some(now + chrono::Duration::minutes(minutes)),
        finish: Some(now + chrono::Duration::minutes(minutes + 30)),
        p10: Some(now + chrono::Duration::minutes(minutes - 5)),
        p90: Some(now + chrono::Duration::minutes(minutes + 5)),
    };
    site.store
        .record_forecast(&drover_store::QueueForecast {
            policy: "drover".into(),
            computed_at: now,
            entries: vec![entry(first, 1, -16), entry(second, 2, -30)],
            finishing: Default::default(),
        })
        .await
        .unwrap();

    let queue = site.get("/queue", &bob).await.body;
    assert!(
        queue.contains(
            "it can never run on this cluster: a worker needs 3 GPUs on one node, and no node has more than 2"
        ),
        "{queue}"
    );
    assert!(!queue.contains("lower priority"), "{queue}");
    assert!(queue.contains("1 job ahead of it"), "{queue}");
    // With the numbers: what its smallest shape needs, and what the round left free.
    assert!(
        queue.contains("; it needs 2 GPUs, 1 of 2 GPUs are free"),
        "{queue}"
    );
    assert!(queue.contains("now (overdue)"), "{queue}");
    assert!(queue.contains("Jobs 1–3 of 3."), "{queue}");
    let rows = queue.split("<tr>").filter(|r| r.contains("/jobs/")).count();
    assert_eq!(rows, 3, "{queue}");
    // Over REST the same: starts never in the past, and never before the same-size job ahead.
    let answer = site.get("/api/v1/queue?limit=2", &bob).await;
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["total"], 3, "{body}");
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    let start = |j: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(j["predicted_start"].as_str().unwrap()).unwrap()
    };
    assert!(
        start(&jobs[0]) >= now && start(&jobs[1]) >= start(&jobs[0]),
        "{body}"
    );
    assert_eq!(
        (jobs[0]["overdue"].clone(), jobs[1]["overdue"].clone()),
        (true.into(), true.into())
    );
    // The huge job's own page says why it waits, and the second's where it stands.
    let page = site.get(&format!("/jobs/{}", huge.0), &bob).await.body;
    assert!(
        page.contains("In the queue") && page.contains("can never run"),
        "{page}"
    );
    let page = site.get(&format!("/jobs/{}", second.0), &bob).await.body;
    assert!(page.contains("#2: 1 job ahead of it"), "{page}");
    // The queue's stream starts with its rows.
    let text = site.first_event("/queue/live", &bob).await;
    assert!(
        text.starts_with("event: rows") && text.contains("huge"),
        "{text}"
    );
    // A malformed offset is said on the page, which still shows the queue.
    let page = site.get("/queue?offset=minus", &bob).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("offset: must be") && page.body.contains("second"),
        "{}",
        page.body
    );
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

/// "Checkpoint now" on a running command job warns that it sends SIGUSR1, which kills a program
/// that does not handle it (the confirmation said only "write a checkpoint now?").
#[tokio::test]
async fn checkpoint_now_on_a_command_job_says_what_it_sends() {
    use drover_core::{JobState, ReasonCode};
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "cmd")).await;
    let job = job_of(&created);
    let generation = site.start(job).await;
    let running = drover_store::StateChange {
        to: JobState::Running,
        reason: ReasonCode::RendezvousComplete,
        message: "test".into(),
        actor: None,
    };
    site.store
        .transition_job_in_generation(job, generation, &running, false)
        .await
        .unwrap();
    let page = site.get(&created.location, &session).await.body;
    assert!(page.contains("data-action=\"checkpoint\""), "{page}");
    assert!(
        page.contains("SIGUSR1") && page.contains("terminated"),
        "{page}"
    );
    // The resize form starts from the job's ranges and says them (it started empty).
    assert!(page.contains("Now workers 1, PS 0."), "{page}");
    assert!(
        page.contains(r#"name="workers_max" min="1" max="1024" required size="4" value="1""#),
        "{page}"
    );
}

/// A job that arrives between the jobs page's render and its stream's connection is on the stream's
/// first event: the stream starts with the rows as they are, not with a silent baseline.
#[tokio::test]
async fn the_jobs_stream_starts_with_the_rows_as_they_are_now() {
    let (site, [_, _, bob]) = Site::new().await;
    let bob = site.sign_in(&bob).await;
    assert!(!site.get("/jobs", &bob).await.body.contains("late-job"));
    site.submit(&bob, &JOB.replace("NAME", "late-job")).await;
    let text = site.first_event("/jobs/live", &bob).await;
    assert!(
        text.starts_with("event: rows") && text.contains("late-job"),
        "{text}"
    );
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

#[tokio::test]
async fn the_submit_form_shows_the_field_error_and_keeps_the_text() {
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let bad = JOB
        .replace("NAME", "bad")
        .replace("min: 1, max: 1", "min: 3, max: 1");
    let answer = site.submit(&session, &bad).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.body.contains("spec.resources.workers"),
        "{}",
        answer.body
    );
    assert!(answer.body.contains("min: 3, max: 1"), "the text is kept");
    let broken = site.submit(&session, "spec: [unclosed").await;
    assert!(broken.status.is_client_error(), "{}", broken.body);
    assert!(broken.body.contains("submit-error"));
    let forged = site
        .form(
            "/submit",
            Some(&session),
            &[("_csrf", "x"), ("document", JOB)],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    // Clone: the spec under a new name, ready to submit.
    let created = site
        .submit(&session, &JOB.replace("NAME", "original"))
        .await;
    let id = created.location.trim_start_matches("/jobs/");
    let clone = site.get(&format!("/submit?from={id}"), &session).await;
    assert!(
        clone.body.contains("generateName: original-"),
        "{}",
        clone.body
    );
    // The form's text as it stands (the default example, a clone) submits, and again: the server
    // names each job (a fixed name failed the second time, and the default one always, as the demo
    // took it).
    let form_text = |body: &str| {
        let start = body.find("<textarea").unwrap();
        let start = start + body[start..].find('>').unwrap() + 1;
        let end = body.find("</textarea>").unwrap();
        body[start..end]
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let default = form_text(&site.get("/submit", &session).await.body);
    for document in [form_text(&clone.body), default] {
        for _ in 0..2 {
            let answer = site.submit(&session, &document).await;
            assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        }
    }
    // A field's path is said once, not twice ("spec.type: spec.type: …").
    let wrong = site
        .submit(
            &session,
            &JOB.replace("NAME", "typo")
                .replace("type: command", "type: nonsense"),
        )
        .await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.body
    );
    assert!(wrong.body.contains("spec.type"), "{}", wrong.body);
    assert!(
        !wrong.body.contains("spec.type: spec.type"),
        "{}",
        wrong.body
    );
    // An experiment submits from the same form and leads to its page (it was refused as "not a
    // DroverJob"); one with a mistake keeps its text and names the field.
    let experiment = include_str!("../../examples/experiments/digits-asha.yaml");
    let answer = site.submit(&session, experiment).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert!(
        answer.location.starts_with("/experiments/"),
        "{}",
        answer.location
    );
    let page = site.get(&answer.location, &session).await;
    assert!(page.body.contains("digits-asha"), "{}", page.body);
    let bad_search = experiment
        .replacen("digits-asha", "digits-asha-2", 1)
        .replacen("searcher:", "searcher_typo:", 1);
    let refused = site.submit(&session, &bad_search).await;
    assert!(refused.status.is_client_error(), "{}", refused.body);
    assert!(refused.body.contains("searcher_typo"), "{}", refused.body);
}

/// A long series is gathered into step ranges by the database (SQLite and Postgres alike) and drawn
/// with its spike.
async fn a_long_series_is_drawn_whole(db: TestDb) {
    use drover_store::{NewMetrics, Scope};
    let store = db.store.clone();
    let (site, [ada, _, _]) = Site::on(db).await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "long")).await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    for step in 0..3000u64 {
        let loss = if step == 1234 {
            50.0
        } else {
            1.0 + 1.0 / (step as f64 + 1.0)
        };
        let metrics = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            gpu_model: "test".into(),
            step,
            values: vec![("loss".into(), loss)],
            recorded_at: chrono::Utc::now(),
        };
        store.record_metrics(&metrics).await.unwrap();
    }
    let buckets = store
        .metric_series(
            Scope::Cluster,
            job,
            "loss",
            drover_store::StepRange::ALL,
            100,
        )
        .await
        .unwrap()
        .buckets;
    assert!(buckets.len() <= 101, "{}", buckets.len());
    assert_eq!(buckets.iter().map(|b| b.samples).sum::<u64>(), 3000);
    assert_eq!(buckets.iter().map(|b| b.max).fold(0.0, f64::max), 50.0);
    let chart = site
        .get(&format!("/jobs/{}/chart?metrics=loss", job.0), &session)
        .await;
    assert_eq!(chart.status, StatusCode::OK);
    assert!(
        chart.body.contains(">50</text>"),
        "the spike sets the axis: {}",
        chart.body
    );
    let page = site.get(&created.location, &session).await;
    assert!(page.body.contains("loss ("), "the page draws the loss");
    // Points that arrive later are read on the next view (the series is kept between views).
    let metrics = NewMetrics {
        key,
        num_ps: 0,
        num_workers: 1,
        gpu_model: "test".into(),
        step: 3000,
        values: vec![("loss".into(), 80.0)],
        recorded_at: chrono::Utc::now(),
    };
    store.record_metrics(&metrics).await.unwrap();
    let chart = site
        .get(&format!("/jobs/{}/chart?metrics=loss", job.0), &session)
        .await;
    assert!(chart.body.contains(">80</text>"), "{}", chart.body);
    // A second metric gets a chart and an axis of its own (a tiny learning rate was flat under the
    // loss on a shared axis), and each line says its values on hover.
    let lr = NewMetrics {
        values: vec![("lr".into(), 0.0003)],
        step: 3001,
        ..metrics
    };
    store.record_metrics(&lr).await.unwrap();
    let both = site
        .get(&format!("/jobs/{}/chart?metrics=loss,lr", job.0), &session)
        .await
        .body;
    assert_eq!(both.matches("<svg").count(), 2, "{both}");
    assert!(
        both.contains("the job&#39;s lr by step") || both.contains("the job's lr by step"),
        "{both}"
    );
    assert!(both.contains(": lr 0.0003</title>"), "{both}");

    // Zoomed to a range of steps, gathered afresh: the spike at 1,234 sets the axis, the later 80
    // is outside; the axis spans the range asked.
    let chart = format!("/jobs/{}/chart", job.0);
    let zoomed = site
        .get(
            &format!("{chart}?metric=loss&x=step&from=1200&to=1300"),
            &session,
        )
        .await
        .body;
    assert!(
        zoomed.contains(">50</text>") && !zoomed.contains(">80</text>"),
        "{zoomed}"
    );
    assert!(
        zoomed.contains(r#" 1200 1300""#),
        "the x axis spans the zoom: {zoomed}"
    );
    let calm = site
        .get(&format!("{chart}?metric=loss&from=0&to=1000"), &session)
        .await
        .body;
    assert!(!calm.contains(">50</text>"), "{calm}");
    // By time since submission.
    let timed = site
        .get(&format!("{chart}?metric=loss&x=time"), &session)
        .await
        .body;
    assert!(timed.contains("time since submission"), "{timed}");
    // An option that cannot be read: the chart says which, as text for the page's script.
    let bad = site
        .get(&format!("{chart}?metric=loss&x=hours"), &session)
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body, "x: `hours`: expected step or time");
    let backwards = site
        .get(&format!("{chart}?metric=loss&from=9&to=3"), &session)
        .await;
    assert_eq!(backwards.status, StatusCode::BAD_REQUEST);
    assert!(backwards.body.starts_with("to: "), "{}", backwards.body);
    // The page takes the same options in its address (its form works without a script), offers
    // the CSV of what it draws, and says an option it cannot read above the default charts.
    let page = site
        .get(
            &format!("/jobs/{}?metric=loss&x=step&from=1200&to=1300", job.0),
            &session,
        )
        .await
        .body;
    assert!(
        page.contains(r#"name="from" min="0" inputmode="numeric" size="8" value="1200""#),
        "{page}"
    );
    let csv_link = format!(
        "/api/v1/jobs/{}/metrics?format=csv&amp;name=loss&amp;from_step=1200&amp;to_step=1300",
        job.0
    );
    let csv_link = csv_link.replace("&amp;", "&#38;");
    assert!(page.contains(&csv_link), "{page}");
    let wrong = site
        .get(&format!("/jobs/{}?x=hours", job.0), &session)
        .await
        .body;
    assert!(
        wrong.contains("x: `hours`: expected step or time"),
        "{wrong}"
    );
    // The CSV: a header, then every sample asked for, in order.
    let csv = site
        .get(
            &format!(
                "/api/v1/jobs/{}/metrics?format=csv&name=loss&from_step=1233&to_step=1235",
                job.0
            ),
            &session,
        )
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    let rows: Vec<&str> = csv.body.lines().collect();
    assert_eq!(
        rows[0],
        "step,name,value,recorded_at,generation,task,workers,ps,gpu_model"
    );
    assert_eq!(rows.len(), 4, "{}", csv.body);
    assert!(rows[2].starts_with("1234,loss,50,"), "{}", rows[2]);
    assert!(rows[2].ends_with(",1,worker-0,1,0,test"), "{}", rows[2]);
}

#[tokio::test]
async fn a_long_series_is_drawn_whole_on_sqlite() {
    a_long_series_is_drawn_whole(TestDb::sqlite().await).await;
}

#[tokio::test]
async fn a_long_series_is_drawn_whole_on_postgres() {
    a_long_series_is_drawn_whole(TestDb::postgres().await).await;
}

/// A job's whole log: the newest page first, earlier pages and the first lines by link, a task
/// filter, a search with its matches marked, contract lines hidden unless asked (on the job page's
/// tail too), a download of the filtered text, and another tenant's job not found. (The page showed
/// the last 200 lines, metric lines and all, with no way further back.)
#[tokio::test]
async fn the_whole_log_pages_back_searches_and_hides_metric_lines() {
    use drover_store::NewLogLine;
    let (site, [ada, _, bob]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "chatty")).await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    // 1,200 lines, every tenth a metrics line, every hundredth on standard error.
    let lines: Vec<NewLogLine> = (0..1200)
        .map(|n| NewLogLine {
            stream: if n % 100 == 55 { "stderr" } else { "stdout" }.into(),
            line: if n % 10 == 3 {
                format!(r#"{{"drover": "metrics", "step": {n}, "values": {{"loss": 1.0}}}}"#)
            } else {
                format!("line {n:04} of the job")
            },
            logged_at: chrono::Utc::now(),
        })
        .collect();
    for chunk in lines.chunks(128) {
        site.store.append_logs(&key, chunk).await.unwrap();
    }
    // As the page escapes it.
    let contract = "&#34;drover&#34;: &#34;metrics&#34;";

    let page = site.get(&created.location, &session).await.body;
    assert!(page.contains("line 1199 of the job"), "{page}");
    assert!(!page.contains(contract), "the tail hides metric lines");
    let logs = format!("/jobs/{}/logs", job.0);
    assert!(page.contains(&format!("href=\"{logs}\"")), "{page}");

    // The newest 500 lines shown (contract lines left out), and a way back.
    let newest = site.get(&logs, &session).await;
    assert_eq!(newest.status, StatusCode::OK);
    let body = &newest.body;
    assert!(body.contains("line 1199 of the job") && !body.contains(contract));
    assert!(
        !body.contains("line 0000 of the job"),
        "only the newest page"
    );
    assert!(body.contains("The newest 500 lines."), "{body}");
    assert!(body.contains("class=\"log-stderr\""), "stderr marked");
    let earlier = site.get(&link_to(body, "← Earlier"), &session).await.body;
    assert!(earlier.contains("line 0644 of the job"), "{earlier}");
    assert!(!earlier.contains("line 1199 of the job"));
    assert!(earlier.contains("Later →"), "{earlier}");
    let first = site
        .get(&link_to(body, "⇤ First lines"), &session)
        .await
        .body;
    assert!(first.contains("line 0000 of the job") && first.contains("The first 500 lines."));

    // A search (ASCII case ignored), its matches marked; metric lines on request.
    let found = site.get(&format!("{logs}?q=LINE+077"), &session).await.body;
    assert!(
        found.contains("<mark>line 077</mark>0 of the job"),
        "{found}"
    );
    assert_eq!(found.matches("<mark>").count(), 9, "0770-0779 but 0773");
    let with_metrics = site
        .get(&format!("{logs}?metrics=true"), &session)
        .await
        .body;
    assert!(with_metrics.contains(contract), "{with_metrics}");
    // Another task's lines: none. A task that cannot be: said, the newest lines shown.
    let other = site
        .get(&format!("{logs}?task=worker-1"), &session)
        .await
        .body;
    assert!(other.contains("No line matches this filter."), "{other}");
    let bad = site.get(&format!("{logs}?task=gpu-1"), &session).await.body;
    assert!(bad.contains("task: `gpu-1` is not a task"), "{bad}");
    assert!(bad.contains("line 1199 of the job"));

    // The download: every shown line as text, filtered like the page.
    let text = site
        .get(
            &format!("/api/v1/jobs/{}/logs?format=text", job.0),
            &session,
        )
        .await;
    assert_eq!(text.status, StatusCode::OK);
    assert_eq!(
        text.body.lines().count(),
        1080,
        "1,200 less 120 metric lines"
    );
    assert!(
        text.body
            .lines()
            .next()
            .unwrap()
            .ends_with("[g1 worker-0] line 0000 of the job")
    );
    let searched = site
        .get(
            &format!("/api/v1/jobs/{}/logs?format=text&q=line+11", job.0),
            &session,
        )
        .await;
    assert_eq!(searched.body.lines().count(), 90, "{}", searched.body);

    // Another tenant's member: no such job.
    let bob = site.sign_in(&bob).await;
    assert_eq!(site.get(&logs, &bob).await.status, StatusCode::NOT_FOUND);
}

/// Jobs side by side: a column each, their metrics on one chart each, their last values, and the
/// spec fields that differ apart from those they share; a job another tenant owns is not found,
/// and a job id that cannot be one is named. The jobs list offers the ticks that lead here.
#[tokio::test]
async fn jobs_compare_side_by_side() {
    use drover_store::NewMetrics;
    let (site, [ada, _, bob]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let mut jobs = Vec::new();
    for (name, seconds, rate) in [("fast-lr", "60", 0.5f64), ("slow-lr", "90", 0.9)] {
        let created = site
            .submit(
                &session,
                &JOB.replace("NAME", name)
                    .replace("'60'", &format!("'{seconds}'")),
            )
            .await;
        let job = job_of(&created);
        let key = site.start_worker(job).await;
        for step in 1..=20u64 {
            let metrics = NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                gpu_model: "test".into(),
                step,
                values: vec![("loss".into(), rate.powi(step as i32))],
                recorded_at: chrono::Utc::now(),
            };
            site.store.record_metrics(&metrics).await.unwrap();
        }
        jobs.push(job);
    }
    let list = site.get("/jobs", &session).await.body;
    assert!(
        list.contains(&format!(
            r#"name="job" value="{}" form="jobs-chosen""#,
            jobs[0].0
        )),
        "{list}"
    );
    assert!(
        list.contains("Compare chosen") && list.contains(r#"data-bulk="cancel""#),
        "{list}"
    );

    let compare = format!("/compare?job={}&job={}", jobs[0].0, jobs[1].0);
    let page = site.get(&compare, &session).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    assert!(
        body.contains(">fast-lr</a>") && body.contains(">slow-lr</a>"),
        "{body}"
    );
    assert!(body.contains("Last loss"), "{body}");
    assert!(
        body.contains(&format!("{:.4} at step 20", 0.5f64.powi(20))),
        "{body}"
    );
    // One chart of the loss, a line per job, each named in the legend.
    assert_eq!(body.matches("<svg").count(), 1, "{body}");
    assert_eq!(body.matches("<polyline").count(), 2, "{body}");
    // The argv differs; the resources are shared.
    let differ = &body[body.find("compare-differ").unwrap()..];
    assert!(differ.contains("spec.command.argv"), "{differ}");
    assert!(!differ[..differ.find("</table>").unwrap()].contains("gpus_per_worker"));
    assert!(body.contains("fields the same in every job"), "{body}");

    // Another tenant's member: not found, said on the page. A malformed id: named.
    let bob = site.sign_in(&bob).await;
    let theirs = site.get(&compare, &bob).await.body;
    assert!(
        theirs.contains(&format!("job: no job `{}`", jobs[0].0)),
        "{theirs}"
    );
    let malformed = site.get("/compare?job=nonsense", &session).await.body;
    assert!(
        malformed.contains("job: `nonsense` is not a job id"),
        "{malformed}"
    );
    let alone = site
        .get(&format!("/compare?job={}", jobs[0].0), &session)
        .await
        .body;
    assert!(alone.contains("Choose two jobs or more"), "{alone}");
}

/// A search of a long log reads a span of lines a page, says so, and goes on from where it stopped
/// (it read the whole log for every page: 0.4 s at 100,000 lines).
#[tokio::test]
async fn a_search_of_a_long_log_reads_a_span_a_page_and_goes_on() {
    use drover_service::logs::SEARCH_SPAN;
    use drover_store::NewLogLine;
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site
        .submit(&session, &JOB.replace("NAME", "long-log"))
        .await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    // The needle is among the first lines only, more than a span from the end.
    let total = SEARCH_SPAN as usize + 1_000;
    let lines: Vec<NewLogLine> = (0..total)
        .map(|n| NewLogLine {
            stream: "stdout".into(),
            line: if n == 7 {
                "a rare needle".to_owned()
            } else {
                format!("step {n}")
            },
            logged_at: chrono::Utc::now(),
        })
        .collect();
    for chunk in lines.chunks(1_000) {
        site.store.append_logs(&key, chunk).await.unwrap();
    }
    let logs = format!("/jobs/{}/logs", job.0);
    let newest = site.get(&format!("{logs}?q=NEEDLE"), &session).await.body;
    assert!(newest.contains("No line matches this filter."), "{newest}");
    assert!(
        newest.contains("A search reads 25,000 lines a page: earlier lines are not searched yet"),
        "{newest}"
    );
    let earlier = site
        .get(&link_to(&newest, "← Earlier"), &session)
        .await
        .body;
    assert!(earlier.contains("a rare <mark>needle</mark>"), "{earlier}");
    assert!(
        !earlier.contains("not searched yet"),
        "the rest is read to the first line"
    );
    assert!(earlier.contains("Later →"), "{earlier}");

    // Through the API, the same from the first line forwards: the cursor goes on past the span.
    let api = format!("/api/v1/jobs/{}/logs", job.0);
    let forward = site
        .get(&format!("{api}?q=step+2&cursor=100"), &session)
        .await;
    assert_eq!(forward.status, StatusCode::OK);
    let page: serde_json::Value = serde_json::from_str(&forward.body).unwrap();
    assert_eq!(page["logs"].as_array().unwrap().len(), 1000, "{page}");
    let none: serde_json::Value = serde_json::from_str(
        &site
            .get(&format!("{api}?q=needle&cursor=100"), &session)
            .await
            .body,
    )
    .unwrap();
    assert!(none["logs"].as_array().unwrap().is_empty(), "{none}");
    assert_eq!(
        none["meta"]["more"], true,
        "lines past the span are not searched yet"
    );
    let next: i64 = none["meta"]["next_cursor"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(next > 100 + i64::from(SEARCH_SPAN) - 10, "{none}");
    let rest: serde_json::Value = serde_json::from_str(
        &site
            .get(&format!("{api}?q=needle&cursor={next}"), &session)
            .await
            .body,
    )
    .unwrap();
    assert!(rest["logs"].as_array().unwrap().is_empty());
    assert_eq!(rest["meta"]["more"], false, "{rest}");
}

/// The jobs list says how many jobs match, pages back to newer jobs as well as on to older ones,
/// and names a filter it does not know (it listed every job under "No jobs match." or silently).
#[tokio::test]
async fn the_jobs_list_counts_pages_both_ways_and_names_unknown_filters() {
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    for name in ["first-job", "second-job", "third-job"] {
        site.submit(&session, &JOB.replace("NAME", name)).await;
    }
    let newest = site.get("/jobs?limit=2", &session).await.body;
    assert!(newest.contains("3 jobs; newest first."), "{newest}");
    assert!(newest.contains("third-job") && newest.contains("second-job"));
    assert!(!newest.contains("first-job") && !newest.contains("Newer jobs"));
    let older = site
        .get(&link_to(&newest, "Older jobs →"), &session)
        .await
        .body;
    assert!(
        older.contains("first-job") && !older.contains("third-job"),
        "{older}"
    );
    assert!(!older.contains("Older jobs →"), "the last page");
    let newer = site
        .get(&link_to(&older, "← Newer jobs"), &session)
        .await
        .body;
    assert!(
        newer.contains("third-job") && newer.contains("second-job"),
        "{newer}"
    );
    assert!(!newer.contains("first-job"), "{newer}");
    assert!(older.contains("⇤ Newest jobs"), "{older}");

    let named = site.get("/jobs?name=second", &session).await.body;
    assert!(
        named.contains("1 job with name containing second"),
        "{named}"
    );
    let unknown = site.get("/jobs?status=running", &session).await.body;
    assert!(
        unknown.contains("unknown filter `status` (the filters are state, tenant, label and name)"),
        "{unknown}"
    );
}
