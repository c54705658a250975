//! The dashboard driven in-process (the whole HTTP application with `oneshot`) on a real SQLite
//! store (Postgres too where a test says so): what every test shares (`Site`: the app, its store
//! and signed-in sessions) here, the tests by page in the modules. The real browser test is
//! `e2e/tests/executors/dashboard.rs`.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

mod job;
mod jobs;
mod logs;
mod queue;
mod session;
mod submit;

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

/// A new API token of `user`.
async fn mint_token(store: &dyn drover_store::Store, user: drover_core::UserId) -> String {
    let token = tokens::generate_token();
    store
        .create_token(&NewToken {
            user_id: user,
            name: "test".into(),
            token_hash: tokens::hash_token(&token),
            prefix: tokens::display_prefix(&token),
            expires_at: None,
            parent: None,
        })
        .await
        .unwrap();
    token
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
            tokens.push(mint_token(store.as_ref(), user.id).await);
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

    /// The token of a cluster administrator (a user of tenant `alpha`), made now.
    async fn cluster_admin(&self) -> String {
        let tenant = self.store.get_tenant_by_name("alpha").await.unwrap();
        let user = self
            .store
            .create_user(&NewUser {
                tenant_id: tenant.id,
                name: "root".into(),
                role: Role::Admin,
                cluster_admin: true,
            })
            .await
            .unwrap();
        mint_token(self.store.as_ref(), user.id).await
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
