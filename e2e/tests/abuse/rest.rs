//! The REST calls the abuse tests make as the users they create: a cluster administrator makes
//! tenants, users and their tokens; everything else goes as whoever the test says.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A server's REST API, called with one token or another.
#[derive(Clone)]
pub struct Rest {
    pub http: reqwest::Client,
    pub url: String,
}

impl Rest {
    pub fn new(url: &str) -> Rest {
        Rest {
            // Trusting the harness's test authority: a harness cluster serves HTTPS.
            http: drover_e2e::http_client(),
            url: url.to_owned(),
        }
    }

    /// `method path` as `token`, with a JSON body; the status and the JSON answer (`null` if none).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply = request.send().await.unwrap();
        let status = reply.status();
        let body = reply.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// The JSON answer of a call that must succeed.
    pub async fn ok(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(method.clone(), path, token, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {answer}");
        answer
    }

    /// Makes tenant `tenant` (with `quota`, or none when it is `{}`, unless the tenant exists) and in
    /// it a user `name` of `role`; returns the user's token. `admin` is a cluster administrator's
    /// token.
    pub async fn user_token(
        &self,
        admin: &str,
        tenant: &str,
        quota: Value,
        name: &str,
        role: &str,
    ) -> String {
        let (status, answer) = self
            .call(
                Method::POST,
                "/api/v1/tenants",
                admin,
                Some(if quota == json!({}) {
                    json!({"name": tenant})
                } else {
                    json!({"name": tenant, "quota": quota})
                }),
            )
            .await;
        assert!(
            status.is_success() || status == StatusCode::CONFLICT,
            "tenant {tenant}: {status} {answer}"
        );
        let user = self
            .ok(
                Method::POST,
                "/api/v1/users",
                admin,
                Some(json!({"name": name, "role": role, "tenant": tenant})),
            )
            .await;
        let token = self
            .ok(
                Method::POST,
                "/api/v1/tokens",
                admin,
                Some(json!({"name": name, "user_id": user["user"]["id"]})),
            )
            .await;
        token["secret"].as_str().unwrap().to_owned()
    }

    /// Submits `spec` as `token`; the job's id.
    pub async fn submit(&self, token: &str, spec: Value) -> String {
        let created = self
            .ok(Method::POST, "/api/v1/jobs", token, Some(spec))
            .await;
        created["job"]["id"].as_str().unwrap().to_owned()
    }
}

/// A command job of one 1-GPU worker that runs `argv`, at `priority`.
pub fn command_job(name: &str, argv: &[&str], priority: i32) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": argv},
            "scheduling": {"priority": priority},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1},
            "max_restarts": 2
        }
    })
}
