//! Tasks as Kubernetes Pods (`drover executor --task-pods`): on a Kubernetes node the executor does
//! not run tasks inside its own container but makes each one a Pod of its own, bound to its node
//! (`nodeName`: the scheduler already placed it), in the job's tenant namespace, with its allocation
//! as requests and limits (memory, CPU, `nvidia.com/gpu`), the restricted Pod Security Standard and
//! no service-account token ([`spec`]). A task's peers reach it at its Pod's name under the job's
//! headless Service; a NetworkPolicy admits to the job's Pods only the job's own. What the task
//! writes is read from its Pod's log (the same contract lines: metrics and checkpoints), its exit
//! from the Pod's status (`OOMKilled` is the job's `out_of_memory`), its stop is the Pod's deletion
//! with the grace period; its Pod is deleted when it ends. At start the executor removes the Pods an
//! earlier run of it left (its tasks die with it, as anywhere).
//!
//! The tenant's namespace is the one labelled `drover.dev/tenant=<tenant>` (the controller's key), or
//! else the namespace named like the tenant, as for DroverJobs. Checkpoints go to the checkpoint
//! storage's volume (`--task-checkpoint-volume`: a volume source the tenant's namespace may mount),
//! mounted in each Pod at the path the server names (an object store is not supported for Pods
//! yet).

pub mod spec;

use crate::task::{Launch, Records, StartError, StopHandle, TAIL_LINES, contract_env, exited};
use drover_proto as pb;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How the executor makes task Pods (`--task-pods` and the flags beside it).
#[derive(Debug, Clone)]
pub struct PodSettings {
    /// The image a task's Pod runs: the executor's own (a `train` job's engine is this program).
    pub image: String,
    /// This program's path inside that image (`train` jobs run `<program> train-task`).
    pub program: String,
    /// The user (and group) task containers run as.
    pub run_as: i64,
    /// The checkpoint storage as a Kubernetes volume source (`{"persistentVolumeClaim": …}`, a CSI
    /// volume, …), mounted in every task Pod where the server keeps checkpoints.
    pub checkpoint_volume: Option<serde_json::Value>,
    /// The namespace label naming a namespace's tenant.
    pub tenant_label: String,
}

/// The executor's Pods: its Kubernetes client, its node, and the namespace of each tenant seen.
pub struct Pods {
    client: kube::Client,
    node: String,
    settings: PodSettings,
    namespaces: Mutex<HashMap<String, String>>,
    /// Where the server keeps checkpoints, once registered.
    checkpoint_root: Mutex<Option<String>>,
}

impl std::fmt::Debug for Pods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pods")
            .field("node", &self.node)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn api_error(what: &str, err: kube::Error) -> String {
    format!("{what}: {err}")
}

impl Pods {
    /// Connects with the Pod's service account (or `KUBECONFIG`) and removes the Pods an earlier run
    /// of this executor left.
    pub async fn connect(settings: PodSettings, node: &str) -> Result<Arc<Pods>, String> {
        let client = kube::Client::try_default()
            .await
            .map_err(|err| format!("cannot reach the Kubernetes API: {err}"))?;
        let pods = Arc::new(Pods {
            client,
            node: node.to_owned(),
            settings,
            namespaces: Mutex::new(HashMap::new()),
            checkpoint_root: Mutex::new(None),
        });
        pods.remove_leftovers().await?;
        Ok(pods)
    }

    fn selector(&self) -> String {
        format!(
            "app.kubernetes.io/managed-by={},drover.dev/node={}",
            spec::MANAGED_BY,
            spec::node_label(&self.node)
        )
    }

    async fn remove_leftovers(&self) -> Result<(), String> {
        let all: Api<Pod> = Api::all(self.client.clone());
        let left = all
            .list(&ListParams::default().labels(&self.selector()))
            .await
            .map_err(|err| api_error("cannot list this node's task Pods", err))?;
        for pod in left.items {
            let (Some(name), Some(namespace)) = (pod.metadata.name, pod.metadata.namespace) else {
                continue;
            };
            tracing::info!(
                pod = name,
                namespace,
                "removing a task Pod an earlier run left"
            );
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let _ = api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
        Ok(())
    }

    /// Where the server keeps checkpoints (from its registration answer).
    pub fn use_checkpoint_root(&self, root: &str) {
        *self
            .checkpoint_root
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(root.to_owned());
    }

    /// The namespace of `tenant`'s tasks: labelled for it, else named like it.
    pub async fn namespace_of(&self, tenant: &str) -> Result<String, StartError> {
        if let Some(known) = self
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
        {
            return Ok(known.clone());
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let labelled = api
            .list(
                &ListParams::default().labels(&format!("{}={tenant}", self.settings.tenant_label)),
            )
            .await
            .map_err(|err| StartError::Node(api_error("cannot list namespaces", err)))?;
        let namespace = match labelled.items.first().and_then(|n| n.metadata.name.clone()) {
            Some(name) => name,
            None => match api.get_opt(tenant).await {
                Ok(Some(_)) => tenant.to_owned(),
                Ok(None) => {
                    return Err(StartError::User(format!(
                        "tenant `{tenant}` has no Kubernetes namespace for its tasks (label one `{}={tenant}`, or name one `{tenant}`)",
                        self.settings.tenant_label
                    )));
                }
                Err(err) => {
                    return Err(StartError::Node(api_error("cannot read namespaces", err)));
                }
            },
        };
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tenant.to_owned(), namespace.clone());
        Ok(namespace)
    }

    /// Where the task's peers will reach it: its Pod's name under its job's Service.
    pub async fn address(&self, key: &pb::TaskKey, tenant: &str) -> Result<String, StartError> {
        let namespace = self.namespace_of(tenant).await?;
        Ok(spec::address(
            &namespace,
            &key.job_id,
            key.generation,
            &key.role,
            key.index,
        ))
    }

    /// The task's container command, its environment, and where it checkpoints.
    fn command(&self, launch: &Launch, processes: u32) -> (Vec<String>, Vec<(String, String)>) {
        let mut env: Vec<(String, String)> = contract_env(launch, "/tmp")
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        env.extend(launch.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.push(("HOME".to_owned(), "/tmp".to_owned()));
        // The device plugin gives the container its GPUs, numbered from 0 inside.
        if !launch.hide_gpus && !launch.spec.gpus.is_empty() {
            let visible: Vec<String> = (0..launch.spec.gpus.len()).map(|i| i.to_string()).collect();
            env.push(("CUDA_VISIBLE_DEVICES".to_owned(), visible.join(",")));
        }
        if launch.spec.train_job.is_empty() {
            if processes <= 1 || launch.spec.argv.is_empty() {
                return (launch.spec.argv.clone(), env);
            }
            // The launcher's processes start under the shim (this image's program), the Pod's
            // first process, which exits with their status.
            let mut command = vec![
                self.settings.program.clone(),
                "task-shim".to_owned(),
                "--in-pod".to_owned(),
                "--local-processes".to_owned(),
                processes.to_string(),
                "--".to_owned(),
            ];
            command.extend(launch.spec.argv.iter().cloned());
            return (command, env);
        }
        env.push(("DROVER_TRAIN_JOB".to_owned(), launch.spec.train_job.clone()));
        (
            vec![
                self.settings.program.clone(),
                "train-task".to_owned(),
                "--job-env".to_owned(),
                "DROVER_TRAIN_JOB".to_owned(),
            ],
            env,
        )
    }

    /// Makes the task's Pod (and its job's Service and NetworkPolicy); what the Pod does arrives on
    /// `events` as a process's output and exit would.
    pub async fn start(
        self: &Arc<Self>,
        launch: Launch,
        events: mpsc::Sender<pb::ExecutorMessage>,
    ) -> Result<(u32, StopHandle), StartError> {
        let root = self
            .checkpoint_root
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        if crate::storage::is_url(&root) {
            return Err(StartError::Node(
                "tasks run as Pods need the checkpoint storage on a volume (--task-checkpoint-volume); an object store is not supported for Pods yet".to_owned(),
            ));
        }
        let namespace = self.namespace_of(&launch.spec.tenant).await?;
        let processes = crate::task::launch_processes(&launch.spec)?;
        if processes > 1 && !launch.spec.image.is_empty() {
            // Its processes would start under the shim, which is not in the job's image.
            return Err(StartError::User(format!(
                "a launcher with {processes} processes per worker cannot run in an image on Kubernetes yet: give each worker one GPU (gpus_per_worker: 1), or run without spec.command.image"
            )));
        }
        let (command, env) = self.command(&launch, processes);
        if command.is_empty() {
            return Err(StartError::User("command.argv is empty".to_owned()));
        }
        let workdir = std::path::Path::new(&launch.spec.workdir)
            .is_absolute()
            .then(|| launch.spec.workdir.clone());
        let task = spec::TaskPod {
            namespace: namespace.clone(),
            node: self.node.clone(),
            job_id: launch.key.job_id.clone(),
            generation: launch.key.generation,
            role: launch.key.role.clone(),
            index: launch.key.index,
            // The job's image, or this executor's own (a train job's engine, a command over it).
            image: if launch.spec.image.is_empty() {
                self.settings.image.clone()
            } else {
                launch.spec.image.clone()
            },
            command,
            env,
            workdir,
            cpus: launch.spec.cpus,
            memory_limit_bytes: launch.spec.memory_limit_bytes,
            gpus: launch.spec.gpus.len() as u32,
            run_as: self.settings.run_as,
            checkpoints: self
                .settings
                .checkpoint_volume
                .clone()
                .map(|volume| (volume, root.clone())),
            grace_s: i64::from(launch.spec.stop_grace_ms / 1000).max(1),
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let created = pods
            .create(&PostParams::default(), &spec::pod(&task))
            .await
            .map_err(|err| StartError::Node(api_error("cannot create the task's Pod", err)))?;
        let name = created.metadata.name.clone().unwrap_or_default();
        self.own_job_objects(&namespace, &launch.key.job_id, &created)
            .await;
        tracing::info!(
            pod = name,
            namespace,
            job.id = launch.key.job_id,
            "task Pod created"
        );
        let (stop_tx, stop_rx) = oneshot::channel();
        let runner = self.clone();
        tokio::spawn(async move {
            runner.follow(pods, name, launch, events, stop_rx).await;
        });
        Ok((0, StopHandle::new(stop_tx)))
    }

    /// The job's Service and NetworkPolicy, made by the first of its Pods or given this Pod as one
    /// more owner, so they go with the job's last Pod.
    async fn own_job_objects(&self, namespace: &str, job_id: &str, pod: &Pod) {
        let owner = spec::owned_by(pod);
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let service = spec::service(namespace, job_id, owner.clone());
        if let Err(err) = add_owner(&services, service, owner.clone()).await {
            tracing::warn!(job.id = job_id, error = %err, "cannot make the job's Service");
        }
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), namespace);
        let policy = spec::network_policy(namespace, job_id, owner.clone());
        if let Err(err) = add_owner(&policies, policy, owner).await {
            tracing::warn!(job.id = job_id, error = %err, "cannot make the job's NetworkPolicy");
        }
    }

    /// Reads the Pod's log and waits for its end (or deletes it when asked to stop); reports its
    /// exit and deletes it.
    async fn follow(
        &self,
        pods: Api<Pod>,
        name: String,
        launch: Launch,
        events: mpsc::Sender<pb::ExecutorMessage>,
        mut stop_rx: oneshot::Receiver<Duration>,
    ) {
        let key = launch.key.clone();
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let checkpoint_dir = PathBuf::from(&launch.spec.checkpoint_dir);
        let mut reader: Option<tokio::task::JoinHandle<()>> = None;
        let mut stop_requested = false;
        let mut deleted = false;
        let outcome = loop {
            let pod = pods.get_opt(&name).await;
            let state = match &pod {
                Ok(Some(pod)) => container_state(pod),
                Ok(None) => Some(PodEnd::Gone),
                Err(_) => None,
            };
            match state {
                Some(PodEnd::Terminated(end)) => break Some(end),
                Some(PodEnd::Gone) => break None,
                Some(PodEnd::Unstartable(message)) => {
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                    let _ = events
                        .send(exited(
                            &key,
                            pb::Exited {
                                spawn_failed: true,
                                message,
                                stop_requested,
                                ..pb::Exited::default()
                            },
                        ))
                        .await;
                    return;
                }
                Some(PodEnd::Running) if reader.is_none() => {
                    let logs = pods
                        .log_stream(
                            &name,
                            &LogParams {
                                follow: true,
                                container: Some("task".to_owned()),
                                ..LogParams::default()
                            },
                        )
                        .await;
                    if let Ok(stream) = logs {
                        use tokio_util::compat::FuturesAsyncReadCompatExt;
                        reader = Some(tokio::spawn(crate::task::read_output(
                            stream.compat(),
                            "stdout",
                            key.clone(),
                            Some((checkpoint_dir.clone(), Records::Direct)),
                            events.clone(),
                            tail.clone(),
                        )));
                    }
                }
                _ => {}
            }
            tokio::select! {
                grace = &mut stop_rx, if !stop_requested => {
                    stop_requested = true;
                    let grace = grace.unwrap_or(Duration::ZERO);
                    let seconds = u32::try_from(grace.as_secs()).unwrap_or(u32::MAX);
                    deleted = pods.delete(&name, &DeleteParams::default().grace_period(seconds)).await.is_ok();
                }
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        };
        if let Some(reader) = reader {
            let abort = reader.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), reader)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if !deleted {
            let _ = pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
        let last_lines: Vec<String> = tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let report = match outcome {
            Some(end) => pb::Exited {
                exit_code: end.signal.is_none().then_some(end.exit_code),
                signal: end.signal,
                stop_requested,
                message: if end.out_of_memory {
                    format!(
                        "was killed for using more than its memory limit ({} MiB)",
                        launch.spec.memory_limit_bytes >> 20
                    )
                } else if end.signal.is_some() || end.exit_code >= 128 {
                    format!("was killed ({})", end.reason)
                } else {
                    format!("exited with status {}", end.exit_code)
                },
                last_lines,
                spawn_failed: false,
                out_of_memory: end.out_of_memory,
            },
            None => pb::Exited {
                signal: Some(9),
                stop_requested,
                message: "its Pod was deleted".to_owned(),
                last_lines,
                ..pb::Exited::default()
            },
        };
        tracing::info!(
            job.id = key.job_id,
            pod = name,
            message = report.message,
            "task Pod ended"
        );
        let _ = events.send(exited(&key, report)).await;
    }
}

/// Creates `object`, or gives the existing one `owner` as one more owner.
async fn add_owner<K>(
    api: &Api<K>,
    object: K,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err),
    }
    let Some(owner) = owner else { return Ok(()) };
    for _ in 0..5 {
        let mut existing = api.get(&name).await?;
        let owners = existing
            .meta_mut()
            .owner_references
            .get_or_insert_with(Vec::new);
        if owners.iter().any(|o| o.uid == owner.uid) {
            return Ok(());
        }
        owners.push(owner.clone());
        match api.replace(&name, &PostParams::default(), &existing).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// How a task's container ended.
#[derive(Debug, Clone)]
struct Ended {
    exit_code: i32,
    signal: Option<i32>,
    reason: String,
    out_of_memory: bool,
}

#[derive(Debug)]
enum PodEnd {
    Running,
    Terminated(Ended),
    /// It cannot start (its image cannot be pulled, its configuration is wrong): the job's fault.
    Unstartable(String),
    Gone,
}

/// Where the task's container stands, from its Pod's status; `None` while it waits to start.
fn container_state(pod: &Pod) -> Option<PodEnd> {
    let status = pod.status.as_ref()?;
    let container = status
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "task")?;
    let state = container.state.as_ref()?;
    if let Some(terminated) = &state.terminated {
        let reason = terminated.reason.clone().unwrap_or_default();
        return Some(PodEnd::Terminated(Ended {
            exit_code: terminated.exit_code,
            signal: terminated.signal,
            out_of_memory: reason == "OOMKilled",
            reason,
        }));
    }
    if state.running.is_some() {
        return Some(PodEnd::Running);
    }
    let waiting = state.waiting.as_ref()?;
    let reason = waiting.reason.clone().unwrap_or_default();
    matches!(
        reason.as_str(),
        "ErrImagePull"
            | "ImagePullBackOff"
            | "InvalidImageName"
            | "CreateContainerConfigError"
            | "CreateContainerError"
            | "RunContainerError"
    )
    .then(|| {
        PodEnd::Unstartable(format!(
            "its Pod cannot start: {reason}: {}",
            waiting.message.clone().unwrap_or_default()
        ))
    })
}
