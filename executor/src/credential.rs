//! The node's credential. An executor enrols once, exchanging an enrolment token for a credential for
//! its node name, and keeps the credential in its data directory (mode 0600): every later session,
//! after a restart too, presents it. A server that no longer knows the credential (revoked, or a new
//! database) makes the executor enrol again, which needs an enrolment token.

use crate::config::ExecutorConfig;
use drover_proto as pb;
use drover_proto::executor_gateway_client::ExecutorGatewayClient;
use std::io::Write;
use std::path::{Path, PathBuf};
use tonic::Code;
use tonic::transport::Channel;

/// The file in the executor's data directory that holds the node credential.
pub const CREDENTIAL_FILE: &str = "node-credential";

pub use crate::fatal::Fatal;

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(CREDENTIAL_FILE)
}

/// The kept credential, if the node is enrolled.
pub fn load(data_dir: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path(data_dir)) {
        Ok(text) if !text.trim().is_empty() => Ok(Some(text.trim().to_owned())),
        Ok(_) => Ok(None),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Keeps the credential: written under a temporary name with mode 0600, synced, then renamed.
fn save(data_dir: &Path, credential: &str) -> std::io::Result<()> {
    let target = path(data_dir);
    let temporary = data_dir.join(format!("{CREDENTIAL_FILE}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    file.write_all(format!("{credential}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &target)
}

/// Forgets a credential the server refused.
pub fn forget(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path(data_dir)) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Enrols the node and keeps its new credential; over TLS (`trust`), with a signing request for
/// the node's key, keeping the certificate and the authority the server returns.
pub async fn enroll(
    client: &mut ExecutorGatewayClient<Channel>,
    config: &ExecutorConfig,
    trust: Option<&crate::identity::Trust>,
) -> anyhow::Result<String> {
    let Some(token) = config.enrollment_token.as_deref() else {
        return Err(Fatal(format!(
            "node `{}` is not enrolled: start the executor once with --enrollment-token (DROVER_ENROLLMENT_TOKEN), from `drover enrollment-token create` or the server's --enrollment-token",
            config.name
        ))
        .into());
    };
    let certificate_request = match trust {
        Some(_) => crate::identity::signing_request(&config.data_dir, &config.name)?,
        None => String::new(),
    };
    let request = pb::EnrollRequest {
        enrollment_token: token.to_owned(),
        node_name: config.name.clone(),
        certificate_request,
    };
    let response = match client.enroll(request).await {
        Ok(response) => response.into_inner(),
        Err(status)
            if matches!(
                status.code(),
                Code::Unauthenticated
                    | Code::AlreadyExists
                    | Code::InvalidArgument
                    | Code::PermissionDenied
            ) =>
        {
            return Err(Fatal(format!("cannot enrol: {}", status.message())).into());
        }
        Err(status) => return Err(status.into()),
    };
    if let Some(trust) = trust {
        crate::identity::keep_authority(trust, &response.authority, &config.data_dir)?;
        crate::identity::keep_certificate(&config.data_dir, &response.certificate)?;
    }
    save(&config.data_dir, &response.credential).map_err(|err| {
        Fatal(format!(
            "enrolled, but cannot keep the credential in {}: {err}",
            path(&config.data_dir).display()
        ))
    })?;
    tracing::info!(node.name = response.node_name, "enrolled with the server");
    Ok(response.credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_credential_is_private_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(load(dir.path()).expect("load"), None);
        save(dir.path(), "drn_secret").expect("save");
        assert_eq!(
            load(dir.path()).expect("load").as_deref(),
            Some("drn_secret")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path(dir.path()))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        forget(dir.path()).expect("forget");
        forget(dir.path()).expect("forgetting twice is harmless");
        assert_eq!(load(dir.path()).expect("load"), None);
    }
}
