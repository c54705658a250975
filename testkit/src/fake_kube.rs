//! A small, stateful fake of the Kubernetes API server over real HTTP, for the controller's tests (no
//! real API server can be installed on these machines). It keeps objects by resource, namespace and
//! name with one resource-version counter, and serves what kube-rs' client, watcher, finalizer
//! helper and event recorder use:
//!
//! - GET, LIST (all namespaces or one), POST, DELETE (with finalizers: `deletionTimestamp` first,
//!   removal when the last finalizer goes), PATCH (JSON patch with `test`, merge patch), and the
//!   `status` subresource (only `status` changes; `generation` moves only with `spec`);
//! - WATCH from a resource version: the history after it, then live changes, BOOKMARKs, and an
//!   `ERROR` 410 Expired when the version is older than the history kept ([`FakeKube::compact`]);
//! - [`FakeKube::restart`]: every connection and watch drops and the port refuses for a moment, then
//!   serves again with the same objects;
//! - LIST with a `labelSelector` of `key=value` terms;
//! - with [`FakeKube::start_with_kubelet`], a fake kubelet ([`crate::fake_kubelet`]) that runs Pods
//!   bound to a node as local processes, writes their status, serves their log (`pods/NAME/log`,
//!   followed), and stops a deleted Pod's process.

use crate::fake_kubelet::{Kubelet, PodState, status_of};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    kind: &'static str,
    resource: String,
    namespace: Option<String>,
    object: Value,
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    /// (resource, namespace or "", name) → object.
    objects: BTreeMap<(String, String, String), Value>,
    /// Changes kept for watches; older ones are compacted away.
    history: Vec<Change>,
    /// The oldest version a watch may start from.
    oldest: u64,
    /// Every request, `METHOD path`, in order.
    requests: Vec<String>,
    /// Watches answered with 410 Gone.
    expired: usize,
}

#[derive(Debug, Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    changes: broadcast::Sender<Change>,
    /// Turns true to drop every connection (a restart).
    down: watch::Receiver<bool>,
    /// Runs Pods bound to a node, when asked for.
    kubelet: Option<Arc<Kubelet>>,
}

/// The fake API server; dropping it stops it.
#[derive(Debug)]
pub struct FakeKube {
    shared: Shared,
    down: watch::Sender<bool>,
    pub addr: SocketAddr,
}

impl FakeKube {
    pub async fn start() -> FakeKube {
        Self::start_serving(None).await
    }

    /// The same, with a fake kubelet that runs the Pods bound to a node as local processes.
    pub async fn start_with_kubelet() -> FakeKube {
        Self::start_serving(Some(Arc::new(Kubelet::default()))).await
    }

    async fn start_serving(kubelet: Option<Arc<Kubelet>>) -> FakeKube {
        let (changes, _) = broadcast::channel(1024);
        let (down_tx, down) = watch::channel(false);
        let shared = Shared {
            inner: Arc::new(Mutex::new(Inner::default())),
            changes,
            down,
            kubelet,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, shared.clone());
        FakeKube {
            shared,
            down: down_tx,
            addr,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this server (no TLS, no auth), as the controller gets in a pod.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Puts an object in place (a namespace, a node) as if someone had created it.
    pub fn seed(&self, resource: &str, namespace: Option<&str>, object: Value) {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let mut inner = self.shared.inner.lock().unwrap();
        let key = (
            resource.to_owned(),
            namespace.unwrap_or("").to_owned(),
            name,
        );
        let kind = if inner.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let object = stamp(&mut inner, object, true);
        inner.objects.insert(key, object.clone());
        let change = record(&mut inner, kind, resource, namespace, object);
        drop(inner);
        let _ = self.shared.changes.send(change);
    }

    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let inner = self.shared.inner.lock().unwrap();
        inner
            .objects
            .get(&(
                resource.to_owned(),
                namespace.unwrap_or("").to_owned(),
                name.to_owned(),
            ))
            .cloned()
    }

    /// Every object of a resource.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        let inner = self.shared.inner.lock().unwrap();
        inner
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The requests seen so far, `METHOD path`.
    pub fn requests(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// How many watches were answered with 410 Gone.
    pub fn expired_watches(&self) -> usize {
        self.shared.inner.lock().unwrap().expired
    }

    /// Forgets the watch history: a watch from any earlier version gets 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.shared.inner.lock().unwrap();
        inner.history.clear();
        inner.oldest = inner.rv;
    }

    /// Drops every connection and watch, refuses connections for `pause`, then serves again with the
    /// same objects (and the same history).
    pub async fn restart(&mut self, pause: std::time::Duration) {
        self.down.send_replace(true);
        tokio::time::sleep(pause).await;
        let (down_tx, down) = watch::channel(false);
        self.down = down_tx;
        self.shared.down = down;
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        serve(listener, self.shared.clone());
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.down.send_replace(true);
    }
}

fn serve(listener: tokio::net::TcpListener, shared: Shared) {
    let mut down = shared.down.clone();
    let app = Router::new().fallback(handle).with_state(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = down.wait_for(|d| *d).await;
            })
            .await;
    });
}

/// A new resource version and the server-owned metadata for an object being written.
fn stamp(inner: &mut Inner, mut object: Value, created: bool) -> Value {
    inner.rv += 1;
    let meta = &mut object["metadata"];
    meta["resourceVersion"] = json!(inner.rv.to_string());
    if created {
        if meta.get("uid").is_none() {
            meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        }
        if meta.get("generation").is_none() {
            meta["generation"] = json!(1);
        }
        if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!("2026-11-22T00:00:00Z");
        }
    }
    object
}

fn record(
    inner: &mut Inner,
    kind: &'static str,
    resource: &str,
    namespace: Option<&str>,
    object: Value,
) -> Change {
    let change = Change {
        rv: inner.rv,
        kind,
        resource: resource.to_owned(),
        namespace: namespace.map(str::to_owned),
        object,
    };
    inner.history.push(change.clone());
    change
}

/// What a path names.
#[derive(Debug)]
struct Target {
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    /// The `log` subresource of a Pod.
    log: bool,
    api_version: String,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ((*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let target =
        |resource: &str, namespace: Option<&str>, name: Option<&&str>, sub: Option<&&str>| Target {
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(|n| (*n).to_owned()),
            status: sub == Some(&"status"),
            log: sub == Some(&"log"),
            api_version: api_version.clone(),
        };
    Some(match rest {
        ["namespaces", ns, resource, more @ ..] => {
            target(resource, Some(ns), more.first(), more.get(1))
        }
        [resource, more @ ..] => target(resource, None, more.first(), more.get(1)),
        [] => return None,
    })
}

fn status_error(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared
        .inner
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {}", uri.path()));
    let Some(target) = parse_path(uri.path()) else {
        return status_error(StatusCode::NOT_FOUND, "NotFound", "no such path");
    };
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (&method, &target.name) {
        (&Method::GET, Some(name)) if target.log => pod_log(&shared, &target, name, &query),
        (&Method::GET, None) if watching => watch_stream(shared, target, &query),
        (&Method::GET, None) => list(&shared, &target, query.get("labelSelector")),
        (&Method::GET, Some(name)) => {
            let key = key(&target, name);
            match shared.inner.lock().unwrap().objects.get(&key) {
                Some(object) => axum::Json(object.clone()).into_response(),
                None => status_error(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.resource),
                ),
            }
        }
        (&Method::POST, None) => create(&shared, &target, &body),
        (&Method::PATCH, Some(name)) => patch(&shared, &target, name, &headers, &body),
        (&Method::PUT, Some(name)) => replace(&shared, &target, name, &body),
        (&Method::DELETE, Some(name)) => {
            if target.resource == "pods"
                && let Some(kubelet) = &shared.kubelet
            {
                let grace = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|b| b["gracePeriodSeconds"].as_u64())
                    .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()))
                    .unwrap_or(30);
                kubelet.stop(target.namespace.as_deref().unwrap_or_default(), name, grace);
            }
            delete(&shared, &target, name)
        }
        _ => status_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "not supported by the fake",
        ),
    }
}

fn key(target: &Target, name: &str) -> (String, String, String) {
    (
        target.resource.clone(),
        target.namespace.clone().unwrap_or_default(),
        name.to_owned(),
    )
}

fn list_kind(items: &[Value]) -> String {
    items
        .first()
        .and_then(|o| o["kind"].as_str())
        .map_or_else(|| "List".to_owned(), |k| format!("{k}List"))
}

/// Whether `object` has every `key=value` (or `key`) of a label selector.
fn selected(object: &Value, selector: Option<&String>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    let labels = &object["metadata"]["labels"];
    selector.split(',').all(|term| match term.split_once('=') {
        Some((key, value)) => labels[key.trim()].as_str() == Some(value.trim()),
        None => labels.get(term.trim()).is_some(),
    })
}

fn list(shared: &Shared, target: &Target, selector: Option<&String>) -> Response {
    let inner = shared.inner.lock().unwrap();
    let items: Vec<Value> = inner
        .objects
        .iter()
        .filter(|((r, ns, _), o)| {
            *r == target.resource
                && target.namespace.as_ref().is_none_or(|want| want == ns)
                && selected(o, selector)
        })
        .map(|(_, o)| o.clone())
        .collect();
    let body = json!({
        "apiVersion": target.api_version,
        "kind": list_kind(&items),
        "metadata": {"resourceVersion": inner.rv.to_string()},
        "items": items,
    });
    axum::Json(body).into_response()
}

fn publish(shared: &Shared, inner: &mut Inner, kind: &'static str, target: &Target, object: Value) {
    let change = record(
        inner,
        kind,
        &target.resource,
        target.namespace.as_deref(),
        object,
    );
    let _ = shared.changes.send(change);
}

fn create(shared: &Shared, target: &Target, body: &[u8]) -> Response {
    let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
        return status_error(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    let name = match object["metadata"]["name"].as_str() {
        Some(name) => name.to_owned(),
        None => match object["metadata"]["generateName"].as_str() {
            Some(prefix) => format!(
                "{prefix}{}",
                &uuid::Uuid::new_v4().simple().to_string()[..5]
            ),
            None => {
                return status_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name: Required value",
                );
            }
        },
    };
    object["metadata"]["name"] = json!(name);
    if let Some(ns) = &target.namespace {
        object["metadata"]["namespace"] = json!(ns);
    }
    let mut inner = shared.inner.lock().unwrap();
    let key = key(target, &name);
    if inner.objects.contains_key(&key) {
        return status_error(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("\"{name}\" already exists"),
        );
    }
    let object = stamp(&mut inner, object, true);
    inner.objects.insert(key, object.clone());
    publish(shared, &mut inner, "ADDED", target, object.clone());
    drop(inner);
    if target.resource == "pods"
        && object["spec"]["nodeName"].is_string()
        && let Some(kubelet) = &shared.kubelet
    {
        let namespace = target.namespace.clone().unwrap_or_default();
        let reporter = shared.clone();
        let (ns, pod) = (namespace.clone(), name.clone());
        kubelet.run(&namespace, &object, move |state| {
            set_pod_status(&reporter, &ns, &pod, &state);
        });
    }
    (StatusCode::CREATED, axum::Json(object)).into_response()
}

/// Writes a Pod's status as its kubelet reports it (a Pod deleted meanwhile stays deleted).
fn set_pod_status(shared: &Shared, namespace: &str, name: &str, state: &PodState) {
    let mut inner = shared.inner.lock().unwrap();
    let key = ("pods".to_owned(), namespace.to_owned(), name.to_owned());
    let Some(mut object) = inner.objects.get(&key).cloned() else {
        return;
    };
    object["status"] = status_of(state);
    let object = stamp(&mut inner, object, false);
    inner.objects.insert(key, object.clone());
    let change = record(&mut inner, "MODIFIED", "pods", Some(namespace), object);
    drop(inner);
    let _ = shared.changes.send(change);
}

/// A Pod's log from its kubelet: what its process wrote, and with `follow=true` what it writes next,
/// until it ends.
fn pod_log(
    shared: &Shared,
    target: &Target,
    name: &str,
    query: &HashMap<String, String>,
) -> Response {
    let namespace = target.namespace.clone().unwrap_or_default();
    let Some(running) = shared
        .kubelet
        .as_ref()
        .and_then(|kubelet| kubelet.get(&namespace, name))
    else {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("container \"task\" in pod \"{name}\" is waiting to start"),
        );
    };
    let follow = query.get("follow").is_some_and(|f| f == "true");
    let stream = async_stream(move |tx: tokio::sync::mpsc::Sender<Bytes>| async move {
        let mut sent = 0;
        loop {
            let notified = running.changed.notified();
            let (chunk, finished) = {
                let log = running.log.lock().unwrap();
                (log[sent..].to_vec(), *running.finished.lock().unwrap())
            };
            sent += chunk.len();
            if !chunk.is_empty() && tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            if finished || !follow {
                return;
            }
            let _ = tokio::time::timeout(std::time::Duration::from_millis(200), notified).await;
        }
    });
    Response::builder()
        .header("content-type", "text/plain")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Stores `new` in place of `old` (same key): the status subresource keeps everything but status;
/// the main resource keeps status; `generation` moves when spec (or deletion) changed. An object
/// being deleted whose last finalizer went is removed.
fn store_update(
    shared: &Shared,
    target: &Target,
    name: &str,
    old: &Value,
    mut new: Value,
) -> Response {
    if target.status {
        let status = new.get("status").cloned().unwrap_or(Value::Null);
        new = old.clone();
        new["status"] = status;
    } else {
        if let Some(status) = old.get("status") {
            new["status"] = status.clone();
        }
        // Server-owned metadata stays the server's.
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match old["metadata"].get(field) {
                Some(value) => new["metadata"][field] = value.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(field);
                    }
                }
            }
        }
        if old.get("spec") != new.get("spec") {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            new["metadata"]["generation"] = json!(generation);
        }
    }
    let mut inner = shared.inner.lock().unwrap();
    let key = key(target, name);
    let deleting = new["metadata"].get("deletionTimestamp").is_some();
    let finalizers_left = new["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let object = stamp(&mut inner, new, false);
    if deleting && !finalizers_left {
        inner.objects.remove(&key);
        publish(shared, &mut inner, "DELETED", target, object.clone());
    } else {
        inner.objects.insert(key, object.clone());
        publish(shared, &mut inner, "MODIFIED", target, object.clone());
    }
    axum::Json(object).into_response()
}

fn current(shared: &Shared, target: &Target, name: &str) -> Option<Value> {
    let inner = shared.inner.lock().unwrap();
    inner.objects.get(&key(target, name)).cloned()
}

fn not_found(name: &str) -> Response {
    status_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("\"{name}\" not found"),
    )
}

fn patch(
    shared: &Shared,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let Some(old) = current(shared, target, name) else {
        return not_found(name);
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return status_error(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    let mut new = old.clone();
    if content_type.starts_with("application/json-patch+json") {
        // As the API server's JSON patch does: `test` for null passes where the path is missing.
        let patch = match patch {
            Value::Array(ops) => Value::Array(
                ops.into_iter()
                    .filter(|op| {
                        !(op["op"] == "test"
                            && op["value"].is_null()
                            && op["path"]
                                .as_str()
                                .is_some_and(|p| old.pointer(p).is_none()))
                    })
                    .collect(),
            ),
            other => other,
        };
        let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch) else {
            return status_error(StatusCode::BAD_REQUEST, "BadRequest", "not a JSON patch");
        };
        if let Err(err) = json_patch::patch(&mut new, &ops) {
            return status_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &format!("the patch does not apply: {err}"),
            );
        }
    } else if content_type.starts_with("application/merge-patch+json") {
        json_patch::merge(&mut new, &patch);
    } else {
        return status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            content_type,
        );
    }
    store_update(shared, target, name, &old, new)
}

fn replace(shared: &Shared, target: &Target, name: &str, body: &[u8]) -> Response {
    let Some(old) = current(shared, target, name) else {
        return not_found(name);
    };
    let Ok(new) = serde_json::from_slice::<Value>(body) else {
        return status_error(StatusCode::BAD_REQUEST, "BadRequest", "not JSON");
    };
    if new["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
        return status_error(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified",
        );
    }
    store_update(shared, target, name, &old, new)
}

fn delete(shared: &Shared, target: &Target, name: &str) -> Response {
    let Some(old) = current(shared, target, name) else {
        return not_found(name);
    };
    let finalizers = old["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let mut inner = shared.inner.lock().unwrap();
    if finalizers {
        if old["metadata"].get("deletionTimestamp").is_some() {
            return axum::Json(old).into_response();
        }
        let mut new = old.clone();
        new["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:01Z");
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
        new["metadata"]["generation"] = json!(generation);
        let object = stamp(&mut inner, new, false);
        inner.objects.insert(key(target, name), object.clone());
        publish(shared, &mut inner, "MODIFIED", target, object.clone());
        (StatusCode::ACCEPTED, axum::Json(object)).into_response()
    } else {
        inner.objects.remove(&key(target, name));
        let object = stamp(&mut inner, old, false);
        publish(shared, &mut inner, "DELETED", target, object.clone());
        axum::Json(object).into_response()
    }
}

fn watch_stream(shared: Shared, target: Target, query: &HashMap<String, String>) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(290u64)
        .min(30);
    let mut live = shared.changes.subscribe();
    let (backlog, expired, api_version) = {
        let mut inner = shared.inner.lock().unwrap();
        let expired = from != 0 && from < inner.oldest;
        inner.expired += usize::from(expired);
        let backlog: Vec<Change> = inner
            .history
            .iter()
            .filter(|c| c.rv > from)
            .cloned()
            .collect();
        (backlog, expired, target.api_version.clone())
    };
    let matches = move |change: &Change| {
        change.resource == target.resource
            && target
                .namespace
                .as_ref()
                .is_none_or(|ns| change.namespace.as_ref() == Some(ns))
    };
    let line = |value: Value| Bytes::from(format!("{value}\n"));
    let mut down = shared.down.clone();
    let stream = async_stream(move |tx: tokio::sync::mpsc::Sender<Bytes>| async move {
        if expired {
            let status = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}});
            let _ = tx.send(line(status)).await;
            return;
        }
        if *down.borrow() {
            return;
        }
        let mut last = from;
        for change in backlog.iter().filter(|c| matches(c)) {
            last = change.rv;
            let _ = tx
                .send(line(json!({"type": change.kind, "object": change.object})))
                .await;
        }
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        loop {
            tokio::select! {
                () = &mut deadline => return,
                _ = down.changed() => return,
                change = live.recv() => match change {
                    Ok(change) if change.rv > last && matches(&change) => {
                        last = change.rv;
                        if tx.send(line(json!({"type": change.kind, "object": change.object}))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let bookmark = json!({"type": "BOOKMARK", "object": {
                        "apiVersion": api_version, "kind": "Bookmark",
                        "metadata": {"resourceVersion": last.max(from).to_string()}}});
                    if tx.send(line(bookmark)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// A body stream fed by a task (the task ends when the client goes away).
fn async_stream<F, Fut>(produce: F) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(tx));
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) },
    )
}
