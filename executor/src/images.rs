//! OCI images on a sandboxing node (`spec.command.image`): pulled from their registry with `skopeo`
//! into one OCI layout in the executor's data directory (layers shared between images), unpacked
//! with `umoci` into a root of their own that every task of that image shares read-only, and kept:
//! a reference pinned by digest, or by a tag other than `latest`, is pulled once per node (as
//! Kubernetes' `IfNotPresent`); `latest` and untagged references are asked of the registry at each
//! start, and reuse the root when the digest is one already unpacked. Pulls on a node run one at a
//! time (as the kubelet's default), so two tasks of one image never pull it twice.
//!
//! A pull that fails is the job's fault (the image does not exist, the registry refuses it), and the
//! task's start fails with the registry's own words; a node without the tools runs no images and
//! says so when it registers, so the scheduler sends it none.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why an image cannot be had: the job's fault (the image does not exist, the registry refuses it),
/// or this node's (a tool that cannot run, a disk that cannot be written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullError {
    User(String),
    Node(String),
}

/// The tools and registry settings images are pulled with (`drover executor --skopeo …`).
#[derive(Debug, Clone)]
pub struct ImageSettings {
    pub skopeo: PathBuf,
    pub umoci: PathBuf,
    /// Registries (`host` or `host:port`) reached over plain HTTP or with unverified certificates:
    /// a local registry.
    pub insecure_registries: Vec<String>,
    /// Credentials for private registries (`skopeo login`'s `auth.json`, or a Docker
    /// `config.json`); without it, skopeo's defaults on this host.
    pub auth_file: Option<PathBuf>,
    /// How long one pull may take before it is given up.
    pub pull_timeout: Duration,
}

impl Default for ImageSettings {
    fn default() -> Self {
        ImageSettings {
            skopeo: PathBuf::from("skopeo"),
            umoci: PathBuf::from("umoci"),
            insecure_registries: Vec::new(),
            auth_file: None,
            pull_timeout: Duration::from_secs(1800),
        }
    }
}

/// An image ready to run a task over.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// The unpacked root (read-only to tasks).
    pub rootfs: PathBuf,
    /// `sha256:…` of its manifest.
    pub digest: String,
    /// The image's environment (`ENV`: its `PATH`, …).
    pub env: Vec<(String, String)>,
    /// The image's working directory (`WORKDIR`), `/` when it names none.
    pub workdir: PathBuf,
    /// Seconds the pull and unpack took; 0 when the node had it.
    pub pulled_in_s: f64,
}

/// The node's image cache and the tools that fill it.
#[derive(Debug)]
pub struct Images {
    settings: ImageSettings,
    /// `<data>/images`: `layout/` (the OCI layout), `refs/` (reference → digest), `roots/` (one
    /// unpacked root per digest).
    dir: PathBuf,
    versions: String,
    /// One pull at a time on this node.
    pulling: tokio::sync::Mutex<()>,
}

impl Images {
    /// The image cache under `data_dir`, or why this node cannot run images (a tool missing).
    pub async fn open(settings: ImageSettings, data_dir: &Path) -> Result<Images, String> {
        let mut versions = Vec::new();
        for (tool, package) in [(&settings.skopeo, "skopeo"), (&settings.umoci, "umoci")] {
            let output = tokio::process::Command::new(tool)
                .arg("--version")
                .output()
                .await
                .map_err(|err| {
                    format!(
                        "cannot run `{}` ({err}); install it (Debian: apt-get install {package})",
                        tool.display()
                    )
                })?;
            if !output.status.success() {
                return Err(format!("`{} --version` failed", tool.display()));
            }
            versions.push(
                String::from_utf8_lossy(&output.stdout)
                    .trim()
                    .replace(" version ", " "),
            );
        }
        let dir = data_dir.join("images");
        for sub in ["refs", "roots"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|err| format!("cannot create {}: {err}", dir.join(sub).display()))?;
        }
        // Roots a killed executor left half unpacked.
        if let Ok(entries) = std::fs::read_dir(dir.join("roots")) {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".unpacking-")
                {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(Images {
            settings,
            dir,
            versions: versions.join(", "),
            pulling: tokio::sync::Mutex::new(()),
        })
    }

    /// The tools, in words: `skopeo 1.9.3, umoci 0.4.7`.
    pub fn describe(&self) -> &str {
        &self.versions
    }

    /// The image `reference` (a full reference: `docker.io/library/python:3.12`) unpacked on this
    /// node, pulled first when the node does not have it. `progress` is told what happens, in words,
    /// for the task's log.
    pub async fn prepare(
        &self,
        reference: &str,
        progress: impl Fn(String),
    ) -> Result<Image, PullError> {
        let key = reference_key(reference);
        let _turn = self.pulling.lock().await;
        let pinned = pinned_digest(reference);
        let known = match &pinned {
            Some(digest) => Some(digest.clone()),
            None if !always_pull(reference) => {
                std::fs::read_to_string(self.dir.join("refs").join(&key))
                    .ok()
                    .map(|d| d.trim().to_owned())
            }
            None => None,
        };
        if let Some(digest) = known
            && let Ok(image) = self.unpacked(&digest)
        {
            return Ok(image);
        }
        let started = Instant::now();
        progress(format!("pulling image {reference}"));
        let digest = self.pull(reference, &key).await?;
        let image = match self.unpacked(&digest) {
            Ok(image) => image,
            Err(_) => {
                progress(format!("unpacking image {reference} ({digest})"));
                self.unpack(&key, &digest).await?;
                self.unpacked(&digest).map_err(PullError::Node)?
            }
        };
        std::fs::write(self.dir.join("refs").join(&key), &digest)
            .map_err(|err| PullError::Node(format!("cannot record the image's digest: {err}")))?;
        let pulled_in_s = started.elapsed().as_secs_f64();
        progress(format!(
            "image {reference} ready ({digest}) in {pulled_in_s:.1}s"
        ));
        Ok(Image {
            pulled_in_s,
            ..image
        })
    }

    /// The root of `digest`, when it is unpacked.
    fn unpacked(&self, digest: &str) -> Result<Image, String> {
        let bundle = self.dir.join("roots").join(digest_dir(digest));
        let config = std::fs::read(bundle.join("config.json"))
            .map_err(|err| format!("{digest} is not unpacked here: {err}"))?;
        let (env, workdir) = process_of(&config)?;
        Ok(Image {
            rootfs: bundle.join("rootfs"),
            digest: digest.to_owned(),
            env,
            workdir,
            pulled_in_s: 0.0,
        })
    }

    fn skopeo(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.settings.skopeo);
        command.kill_on_drop(true);
        command
    }

    /// Copies `reference` into the node's layout under the tag `key`; its manifest's digest.
    async fn pull(&self, reference: &str, key: &str) -> Result<String, PullError> {
        let digest_file = self.dir.join(format!(".digest-{key}"));
        let _ = std::fs::remove_file(&digest_file);
        let mut command = self.skopeo();
        command.arg("copy").arg("--quiet");
        if self.insecure(reference) {
            command.arg("--src-tls-verify=false");
        }
        if let Some(auth) = &self.settings.auth_file {
            command.arg("--src-authfile").arg(auth);
        }
        command
            .arg("--digestfile")
            .arg(&digest_file)
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:{key}", self.dir.join("layout").display()));
        let output = tokio::time::timeout(self.settings.pull_timeout, command.output())
            .await
            .map_err(|_| {
                PullError::User(format!(
                    "cannot pull image {reference}: no answer within {}s",
                    self.settings.pull_timeout.as_secs()
                ))
            })?
            .map_err(|err| {
                PullError::Node(format!(
                    "cannot run `{}`: {err}",
                    self.settings.skopeo.display()
                ))
            })?;
        if !output.status.success() {
            return Err(PullError::User(format!(
                "cannot pull image {reference}: {}",
                tool_message(&output.stderr)
            )));
        }
        let digest = std::fs::read_to_string(&digest_file)
            .map_err(|err| PullError::Node(format!("skopeo wrote no digest: {err}")))?;
        let _ = std::fs::remove_file(&digest_file);
        let digest = digest.trim().to_owned();
        if !is_digest(&digest) {
            return Err(PullError::Node(format!(
                "skopeo wrote an unexpected digest `{digest}`"
            )));
        }
        Ok(digest)
    }

    /// Unpacks the layout's `key` into the root of `digest` (through a temporary folder, so a
    /// half-unpacked root is never used).
    async fn unpack(&self, key: &str, digest: &str) -> Result<(), PullError> {
        let roots = self.dir.join("roots");
        let target = roots.join(digest_dir(digest));
        let temporary = roots.join(format!(".unpacking-{}", digest_dir(digest)));
        let _ = std::fs::remove_dir_all(&temporary);
        let output = tokio::process::Command::new(&self.settings.umoci)
            .arg("unpack")
            .arg("--image")
            .arg(format!("{}:{key}", self.dir.join("layout").display()))
            .arg(&temporary)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|err| {
                PullError::Node(format!(
                    "cannot run `{}`: {err}",
                    self.settings.umoci.display()
                ))
            })?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(&temporary);
            return Err(PullError::User(format!(
                "cannot unpack image {digest}: {}",
                tool_message(&output.stderr)
            )));
        }
        prepare_root(&temporary.join("rootfs")).map_err(PullError::Node)?;
        std::fs::rename(&temporary, &target)
            .map_err(|err| PullError::Node(format!("cannot keep the unpacked image: {err}")))?;
        Ok(())
    }

    fn insecure(&self, reference: &str) -> bool {
        let registry = reference.split('/').next().unwrap_or_default();
        self.settings
            .insecure_registries
            .iter()
            .any(|r| r == registry)
    }
}

/// A root's `/tmp` as a sandbox needs it: a folder of mode 1777 (the runtime gives the tmpfs over it
/// the folder's mode), made when the image has none.
fn prepare_root(rootfs: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = rootfs.join("tmp");
    match std::fs::symlink_metadata(&tmp) {
        Ok(metadata) if metadata.file_type().is_symlink() => return Ok(()),
        Ok(_) => {}
        Err(_) => std::fs::create_dir(&tmp)
            .map_err(|err| format!("cannot make {}: {err}", tmp.display()))?,
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
        .map_err(|err| format!("cannot prepare {}: {err}", tmp.display()))
}

/// The environment and working directory of the runtime configuration `umoci` wrote.
fn process_of(config: &[u8]) -> Result<(Vec<(String, String)>, PathBuf), String> {
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(config)
        .map_err(|err| format!("cannot read the unpacked image's configuration: {err}"))?;
    let process = spec.process().as_ref();
    let env = process
        .and_then(|p| p.env().as_ref())
        .map(|env| {
            env.iter()
                .filter_map(|pair| pair.split_once('='))
                // umoci adds a terminal type the task has no terminal for.
                .filter(|(name, _)| *name != "TERM")
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let workdir = process
        .map(|p| p.cwd().clone())
        .filter(|cwd| cwd.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok((env, workdir))
}

/// The last line skopeo or umoci wrote, without its log prefix (`time="…" level=fatal msg="…"`).
fn tool_message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed without a message")
        .trim();
    let message = match line.split_once("msg=\"") {
        Some((_, rest)) => rest.strip_suffix('"').unwrap_or(rest).replace("\\\"", "\""),
        None => line.to_owned(),
    };
    message.chars().take(1000).collect()
}

/// A file name for a reference: its SHA-256, in hex (also a valid tag in the layout).
fn reference_key(reference: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(reference.as_bytes()))
}

/// `sha256:<hex>` of a reference pinned by digest.
fn pinned_digest(reference: &str) -> Option<String> {
    let (_, digest) = reference.rsplit_once('@')?;
    is_digest(digest).then(|| digest.to_owned())
}

/// Whether a reference names a moving tag the registry must be asked about at each start.
fn always_pull(reference: &str) -> bool {
    let name = reference.rsplit('/').next().unwrap_or(reference);
    match name.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

fn is_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `sha256_<hex>`: a digest as a folder name.
fn digest_dir(digest: &str) -> String {
    digest.replace(':', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_message_is_its_last_line_without_the_log_prefix() {
        let stderr = b"time=\"2026-11-26T13:38:18Z\" level=fatal msg=\"initializing source docker://r/x:1: reading manifest 1 in r/x: manifest unknown: manifest unknown\"\n";
        assert_eq!(
            tool_message(stderr),
            "initializing source docker://r/x:1: reading manifest 1 in r/x: manifest unknown: manifest unknown"
        );
        assert_eq!(tool_message(b"plain\n\n"), "plain");
        assert_eq!(tool_message(b""), "failed without a message");
    }

    #[test]
    fn which_references_are_pulled_again() {
        assert!(always_pull("docker.io/library/python:latest"));
        assert!(always_pull("registry:5000/team/x"));
        assert!(!always_pull("registry:5000/team/x:v3"));
        let pinned = format!("docker.io/library/python@sha256:{}", "a".repeat(64));
        assert_eq!(
            pinned_digest(&pinned),
            Some(format!("sha256:{}", "a".repeat(64)))
        );
        assert_eq!(pinned_digest("docker.io/library/python:3"), None);
        assert_eq!(reference_key("x").len(), 64);
    }

    #[test]
    fn an_images_environment_and_working_directory_are_read_without_its_terminal() {
        let config = br#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/app","args":["sh"],"env":["PATH=/usr/bin:/bin","TERM=xterm","A=b=c"],"user":{"uid":0,"gid":0}}}"#;
        let (env, workdir) = process_of(config).unwrap();
        assert_eq!(
            env,
            vec![
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("A".to_owned(), "b=c".to_owned())
            ]
        );
        assert_eq!(workdir, PathBuf::from("/app"));
    }
}
