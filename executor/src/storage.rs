//! Checkpoint storage as the server hands it over at registration: a directory every executor
//! reaches (tasks use it as it is), or an object store (`s3://bucket/prefix`), which tasks never see.
//! With an object store a task writes into a local copy of its generation's directory under the
//! executor's data directory; the executor uploads each checkpoint the task announces before it
//! records it (so only checkpoints wholly in the store are ever resumed from), and downloads the one
//! a task resumes from before the task starts.

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path as Key;
use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// An object store holding the checkpoints, and this executor's local copies of them.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The root as the server names it, without a trailing slash: `s3://bucket/prefix`.
    root: String,
    store: Arc<dyn ObjectStore>,
    prefix: Key,
    /// Where the local copies live: `<data dir>/checkpoints`.
    cache: PathBuf,
    /// One download at a time per checkpoint: a job's tasks on this node resume from the same one.
    downloads: Arc<std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Whether a checkpoint root is an object store's URL rather than a directory.
pub fn is_url(root: &str) -> bool {
    root.contains("://")
}

impl Remote {
    /// Connects to the object store `root` names (`s3://bucket/prefix`), with credentials, region and
    /// endpoint from this process's `AWS_*` environment (as every S3 tool reads them).
    pub fn connect(root: &str, cache: PathBuf) -> anyhow::Result<Self> {
        let root = root.trim_end_matches('/');
        let Some(path) = root.strip_prefix("s3://") else {
            anyhow::bail!(
                "checkpoint storage {root}: only s3:// object stores are supported (S3 and S3-compatible stores such as MinIO, Ceph or R2)"
            );
        };
        let prefix = path.split_once('/').map_or("", |(_bucket, prefix)| prefix);
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url(root)
            .build()
            .map_err(|err| anyhow::anyhow!("checkpoint storage {root}: {err}"))?;
        let prefix = Key::parse(prefix)
            .map_err(|err| anyhow::anyhow!("checkpoint storage {root}: {err}"))?;
        Ok(Self::with_store(root, Arc::new(store), prefix, cache))
    }

    /// A store already built (tests use an in-memory one).
    pub fn with_store(
        root: &str,
        store: Arc<dyn ObjectStore>,
        prefix: Key,
        cache: PathBuf,
    ) -> Self {
        Self {
            root: root.trim_end_matches('/').to_owned(),
            store,
            prefix,
            cache,
            downloads: Arc::default(),
        }
    }

    /// The root as the server names it: `s3://bucket/prefix`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The path below the root of a location the server named: `12/g3/step-00000100` for
    /// `s3://bucket/prefix/12/g3/step-00000100`; only plain names, never `..`.
    fn relative<'a>(&self, location: &'a str) -> Result<&'a str, String> {
        let rest = location
            .strip_prefix(self.root.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| format!("{location} is not in the checkpoint storage {}", self.root))?;
        let plain = !rest.is_empty()
            && rest.split('/').all(|part| {
                !part.is_empty() && part != "." && part != ".." && !part.contains('\0')
            });
        if plain {
            Ok(rest)
        } else {
            Err(format!(
                "{location} is not a plain path in the checkpoint storage"
            ))
        }
    }

    /// This executor's copy of a location in the store.
    pub fn local(&self, location: &str) -> Result<PathBuf, String> {
        Ok(self.cache.join(self.relative(location)?))
    }

    /// The location in the store of a local copy.
    pub fn location(&self, local: &Path) -> Result<String, String> {
        let rest = local
            .strip_prefix(&self.cache)
            .map_err(|_| format!("{} is not in the checkpoint cache", local.display()))?;
        let mut location = self.root.clone();
        for component in rest.components() {
            let Component::Normal(name) = component else {
                return Err(format!("{} is not a plain path", local.display()));
            };
            location.push('/');
            location.push_str(
                name.to_str()
                    .ok_or_else(|| format!("{} is not UTF-8", local.display()))?,
            );
        }
        Ok(location)
    }

    fn key(&self, relative: &str) -> Key {
        relative
            .split('/')
            .fold(self.prefix.clone(), |key, part| key.child(part))
    }

    /// Uploads a checkpoint (a file, or a directory's files) from its local copy; returns its
    /// location in the store.
    pub async fn upload(&self, local: &Path) -> anyhow::Result<String> {
        let location = self.location(local).map_err(anyhow::Error::msg)?;
        let base = self.key(self.relative(&location).map_err(anyhow::Error::msg)?);
        let root = local.to_path_buf();
        let files = tokio::task::spawn_blocking(move || files_under(&root)).await??;
        anyhow::ensure!(!files.is_empty(), "{} holds no files", local.display());
        for (relative, path) in files {
            let key = relative
                .iter()
                .fold(base.clone(), |key, part| key.child(part.as_str()));
            let mut file = tokio::fs::File::open(&path).await?;
            let mut writer = object_store::buffered::BufWriter::new(self.store.clone(), key);
            tokio::io::copy(&mut file, &mut writer).await?;
            writer
                .shutdown()
                .await
                .map_err(|err| anyhow::anyhow!("uploading {}: {err}", path.display()))?;
        }
        Ok(location)
    }

    /// Removes from the store what was uploaded from a local copy that no longer exists (the task's
    /// retention deleted it). Returns how many objects went.
    pub async fn forget(&self, local: &Path) -> anyhow::Result<usize> {
        let location = self.location(local).map_err(anyhow::Error::msg)?;
        let key = self.key(self.relative(&location).map_err(anyhow::Error::msg)?);
        let mut gone = 0;
        let objects: Vec<_> = self.store.list(Some(&key)).try_collect().await?;
        for object in objects {
            self.store.delete(&object.location).await?;
            gone += 1;
        }
        match self.store.delete(&key).await {
            Ok(()) => gone += 1,
            Err(object_store::Error::NotFound { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        Ok(gone)
    }

    /// Makes sure the checkpoint at `location` is here: the local copy when there is one (this
    /// executor wrote or fetched it), else a download into a temporary name renamed when whole.
    /// Returns the local path.
    pub async fn fetch(&self, location: &str) -> anyhow::Result<PathBuf> {
        let relative = self.relative(location).map_err(anyhow::Error::msg)?;
        let local = self.cache.join(relative);
        let lock = self
            .downloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(local.clone())
            .or_default()
            .clone();
        let fetched = {
            let _one_at_a_time = lock.lock().await;
            self.fetch_once(location, relative, &local).await
        };
        drop(lock);
        self.downloads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, lock| Arc::strong_count(lock) > 1);
        fetched.map(|()| local)
    }

    async fn fetch_once(&self, location: &str, relative: &str, local: &Path) -> anyhow::Result<()> {
        if tokio::fs::try_exists(local).await.unwrap_or(false) {
            return Ok(());
        }
        let key = self.key(relative);
        let parent = local
            .parent()
            .ok_or_else(|| anyhow::anyhow!("{location} has no parent"))?;
        tokio::fs::create_dir_all(parent).await?;
        let name = local
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("checkpoint");
        let tmp = parent.join(format!(
            ".{name}.download-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        let _ = tokio::fs::remove_file(&tmp).await;
        let single = match self.store.head(&key).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(err) => return Err(err.into()),
        };
        if single {
            self.download(&key, &tmp).await?;
        } else {
            let objects: Vec<_> = self.store.list(Some(&key)).try_collect().await?;
            if objects.is_empty() {
                anyhow::bail!("checkpoint {location} is not in the store");
            }
            for object in objects {
                let Some(parts) = object.location.prefix_match(&key) else {
                    continue;
                };
                let mut path = tmp.clone();
                for part in parts {
                    let part = part.as_ref();
                    if part == "." || part == ".." || part.contains(['/', '\0']) {
                        anyhow::bail!("checkpoint {location} holds an unsafe name {part:?}");
                    }
                    path.push(part);
                }
                if let Some(dir) = path.parent() {
                    tokio::fs::create_dir_all(dir).await?;
                }
                self.download(&object.location, &path).await?;
            }
        }
        tokio::fs::rename(&tmp, local).await?;
        Ok(())
    }

    async fn download(&self, key: &Key, path: &Path) -> anyhow::Result<()> {
        let mut stream = self.store.get(key).await?.into_stream();
        let mut file = tokio::fs::File::create(path).await?;
        while let Some(chunk) = stream.try_next().await? {
            file.write_all(&chunk).await?;
        }
        file.sync_all().await?;
        Ok(())
    }
}

/// The files under `root` (or `root` itself when it is a file), each with its path below `root`.
fn files_under(root: &Path) -> std::io::Result<Vec<(Vec<String>, PathBuf)>> {
    let mut files = Vec::new();
    let mut pending = vec![(Vec::new(), root.to_path_buf())];
    while let Some((relative, path)) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                let entry = entry?;
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let mut child = relative.clone();
                child.push(name);
                pending.push((child, entry.path()));
            }
        } else if meta.is_file() {
            files.push((relative, path));
        }
        // Symlinks and other special files stay behind: a task cannot make the executor upload
        // what is outside its checkpoint.
    }
    files.sort();
    Ok(files)
}

/// What one task has uploaded, so that what its retention deletes locally goes from the store too.
#[derive(Debug, Default)]
pub struct Uploaded(BTreeSet<PathBuf>);

impl Uploaded {
    pub fn note(&mut self, local: PathBuf) {
        self.0.insert(local);
    }

    /// Forgets, locally and in the store, the uploads whose local copies are gone.
    pub async fn prune(&mut self, remote: &Remote) {
        let gone: Vec<PathBuf> = self.0.iter().filter(|p| !p.exists()).cloned().collect();
        for local in gone {
            match remote.forget(&local).await {
                Ok(_) => {
                    self.0.remove(&local);
                }
                Err(err) => {
                    tracing::warn!(path = %local.display(), error = %err, "cannot remove a deleted checkpoint from the store");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn remote(cache: &Path) -> (Remote, Arc<InMemory>) {
        let store = Arc::new(InMemory::new());
        let remote = Remote::with_store(
            "s3://bucket/ckpt/",
            store.clone(),
            Key::from("ckpt"),
            cache.to_path_buf(),
        );
        (remote, store)
    }

    #[test]
    fn locations_map_to_local_copies_and_back_and_nothing_escapes() {
        let cache = PathBuf::from("/data/checkpoints");
        let (remote, _) = remote(&cache);
        let local = remote
            .local("s3://bucket/ckpt/12/g3/step-00000100")
            .unwrap();
        assert_eq!(local, cache.join("12/g3/step-00000100"));
        assert_eq!(
            remote.location(&local).unwrap(),
            "s3://bucket/ckpt/12/g3/step-00000100"
        );
        for bad in [
            "s3://bucket/ckpt/12/../../etc",
            "s3://bucket/ckpt",
            "s3://bucket/ckpt/",
            "s3://bucket/ckptx/1",
            "s3://other/ckpt/1",
            "s3://bucket/ckpt/1//2",
            "/data/checkpoints/1",
        ] {
            assert!(remote.local(bad).is_err(), "{bad}");
        }
        assert!(remote.location(Path::new("/elsewhere/1")).is_err());
    }

    #[tokio::test]
    async fn a_checkpoint_goes_up_comes_down_elsewhere_and_is_forgotten() {
        let writer = tempfile::tempdir().unwrap();
        let reader = tempfile::tempdir().unwrap();
        let (up, store) = remote(writer.path());
        let down = Remote::with_store(
            "s3://bucket/ckpt",
            store.clone(),
            Key::from("ckpt"),
            reader.path().to_path_buf(),
        );
        let step = writer.path().join("7/g1/step-00000010");
        std::fs::create_dir_all(step.join("nested")).unwrap();
        std::fs::write(step.join("manifest.json"), b"{\"step\": 10}").unwrap();
        std::fs::write(step.join("nested/model.safetensors"), vec![7u8; 3 << 20]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", step.join("escape")).unwrap();
        let location = up.upload(&step).await.unwrap();
        assert_eq!(location, "s3://bucket/ckpt/7/g1/step-00000010");

        let fetched = down.fetch(&location).await.unwrap();
        assert_eq!(fetched, reader.path().join("7/g1/step-00000010"));
        assert_eq!(
            std::fs::read(fetched.join("manifest.json")).unwrap(),
            b"{\"step\": 10}"
        );
        assert_eq!(
            std::fs::read(fetched.join("nested/model.safetensors")).unwrap(),
            vec![7u8; 3 << 20]
        );
        assert!(!fetched.join("escape").exists(), "symlinks stay behind");
        assert!(
            down.fetch("s3://bucket/ckpt/7/g1/step-00000020")
                .await
                .is_err(),
            "a checkpoint that is not in the store"
        );
        // Three tasks resuming from the same checkpoint at once: one download, three answers.
        std::fs::remove_dir_all(&fetched).unwrap();
        let (a, b, c) = tokio::join!(
            down.fetch(&location),
            down.fetch(&location),
            down.fetch(&location)
        );
        for path in [a, b, c] {
            assert_eq!(path.unwrap(), fetched);
        }
        assert_eq!(
            std::fs::read(fetched.join("nested/model.safetensors")).unwrap(),
            vec![7u8; 3 << 20]
        );
        let leftovers: Vec<_> = std::fs::read_dir(fetched.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            leftovers.len(),
            1,
            "no temporary downloads left: {leftovers:?}"
        );
        assert!(down.downloads.lock().unwrap().is_empty());

        let mut uploaded = Uploaded::default();
        uploaded.note(step.clone());
        uploaded.prune(&up).await;
        assert_eq!(
            store
                .list(None)
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .len(),
            2
        );
        std::fs::remove_dir_all(&step).unwrap();
        uploaded.prune(&up).await;
        assert!(
            store
                .list(None)
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_single_file_checkpoint_round_trips() {
        let writer = tempfile::tempdir().unwrap();
        let reader = tempfile::tempdir().unwrap();
        let (up, store) = remote(writer.path());
        let down = Remote::with_store(
            "s3://bucket/ckpt",
            store,
            Key::from("ckpt"),
            reader.path().to_path_buf(),
        );
        let file = writer.path().join("3/g2/weights.bin");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"weights").unwrap();
        let location = up.upload(&file).await.unwrap();
        let fetched = down.fetch(&location).await.unwrap();
        assert_eq!(std::fs::read(fetched).unwrap(), b"weights");
    }
}
