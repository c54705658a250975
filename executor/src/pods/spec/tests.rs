//! A task's Pod, its job's Service and NetworkPolicy, field by field.

use super::*;
use serde_json::{Value, json};

fn task() -> TaskPod {
    TaskPod {
        namespace: "team-vision".into(),
        node: "gpu-07".into(),
        job_id: "01A216F3-7026-74C3-9FC5-1D565169ED78".into(),
        generation: 3,
        role: "worker".into(),
        index: 1,
        image: "ghcr.io/drover-dev/drover-cuda:0.1.0".into(),
        command: vec!["python3".into(), "train.py".into()],
        env: vec![("DROVER_RANK".into(), "1".into())],
        workdir: Some("/workspace".into()),
        cpus: 4,
        memory_limit_bytes: 8 << 30,
        gpus: 2,
        run_as: 10001,
        checkpoints: Some((
            json!({"persistentVolumeClaim": {"claimName": "drover-checkpoints"}}),
            "/var/lib/drover/checkpoints".into(),
        )),
        grace_s: 30,
    }
}

fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

#[test]
fn a_tasks_pod_is_bound_to_its_node_in_its_tenants_namespace_with_its_allocation() {
    let pod = json_of(&pod(&task()));
    let name = "d-01a216f3-7026-74c3-9fc5-1d565169ed78-g3-w-1";
    assert_eq!(pod["metadata"]["name"], name);
    assert!(name.len() <= 63);
    assert_eq!(pod["metadata"]["namespace"], "team-vision");
    assert_eq!(pod["metadata"]["labels"]["drover.dev/node"], "gpu-07");
    assert_eq!(
        pod["metadata"]["labels"]["drover.dev/job"],
        "01A216F3-7026-74C3-9FC5-1D565169ED78"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["nodeName"], "gpu-07");
    assert_eq!(spec["hostname"], name);
    assert_eq!(
        spec["subdomain"],
        "drover-01a216f3-7026-74c3-9fc5-1d565169ed78"
    );
    assert_eq!(spec["restartPolicy"], "Never");
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "ghcr.io/drover-dev/drover-cuda:0.1.0");
    assert_eq!(container["command"], json!(["python3", "train.py"]));
    assert_eq!(container["workingDir"], "/workspace");
    let limits = json!({"cpu": "4", "memory": (8u64 << 30).to_string(), "nvidia.com/gpu": "2"});
    assert_eq!(container["resources"]["limits"], limits);
    assert_eq!(
        container["resources"]["requests"], limits,
        "requests = limits"
    );
    assert_eq!(
        container["volumeMounts"][1],
        json!({"name": "checkpoints", "mountPath": "/var/lib/drover/checkpoints"})
    );
    assert_eq!(
        spec["volumes"][1]["persistentVolumeClaim"]["claimName"],
        "drover-checkpoints"
    );
}

/// The restricted Pod Security Standard: not root, no privilege escalation, every capability
/// dropped, the runtime's default seccomp profile; and no service-account token, no service links.
#[test]
fn a_tasks_pod_meets_the_restricted_pod_security_standard_and_has_no_token() {
    let pod = json_of(&pod(&task()));
    let spec = &pod["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let security = &spec["containers"][0]["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 10001);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    // Nothing the standard forbids.
    for forbidden in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(spec[forbidden].is_null(), "{forbidden}");
    }
    assert!(security["privileged"].is_null());
    assert!(
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["hostPath"].is_null()),
        "no hostPath volume"
    );
    assert_eq!(
        spec["volumes"][0]["emptyDir"]["sizeLimit"],
        (8u64 << 30).to_string(),
        "a private /tmp within its memory"
    );
}

#[test]
fn peers_reach_a_task_at_its_pods_name_under_the_jobs_headless_service() {
    let job = "01a216f3-7026-74c3-9fc5-1d565169ed78";
    assert_eq!(
        address("team-vision", job, 2, "ps", 0),
        format!("d-{job}-g2-ps-0.drover-{job}.team-vision.svc:29400")
    );
    let service = json_of(&service("team-vision", job, None));
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(service["spec"]["selector"], json!({"drover.dev/job": job}));
}

#[test]
fn the_jobs_network_policy_admits_only_its_own_pods() {
    let job = "01a216f3-7026-74c3-9fc5-1d565169ed78";
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "d-x".into(),
        uid: "uid-1".into(),
        ..OwnerReference::default()
    };
    let policy = json_of(&network_policy("team-vision", job, Some(owner)));
    assert_eq!(policy["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let spec = &policy["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        json!({"drover.dev/job": job})
    );
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        spec["ingress"],
        json!([{"from": [{"podSelector": {"matchLabels": {"drover.dev/job": job}}}]}])
    );
}

#[test]
fn a_checkpoint_volume_is_one_volume_source() {
    let csi = checkpoint_volume(&json!({"csi": {"driver": "nfs.csi.k8s.io",
        "volumeAttributes": {"server": "nfs", "share": "/ckpt"}}}))
    .unwrap();
    assert_eq!(csi.name, "checkpoints");
    assert_eq!(csi.csi.unwrap().driver, "nfs.csi.k8s.io");
    assert!(checkpoint_volume(&json!({})).is_none(), "no source");
    assert!(checkpoint_volume(&json!("pvc")).is_none(), "not an object");
    assert!(
        checkpoint_volume(&json!({"emptyDir": {}, "persistentVolumeClaim": {"claimName": "x"}}))
            .is_none(),
        "two sources"
    );
}
