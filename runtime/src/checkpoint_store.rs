//! Checkpoint storage in an object store (`--checkpoint-store s3://bucket/prefix`). Executors keep
//! local copies and upload each checkpoint before they record it (see `drover_executor::storage`);
//! the server only reads: a checkpoint's download comes straight from the store.

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path as Key;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub struct ObjectStorage {
    /// `s3://bucket/prefix`, no trailing slash: what the server hands executors, and how recorded
    /// checkpoint paths begin.
    root: String,
    store: Arc<dyn ObjectStore>,
    prefix: Key,
}

/// One object of a checkpoint: its name inside the checkpoint (empty for a single-file checkpoint).
#[derive(Debug)]
pub struct Entry {
    pub key: Key,
    pub name: Vec<String>,
    pub size: u64,
}

impl ObjectStorage {
    /// Connects to `s3://bucket/prefix` with credentials, region and endpoint from this process's
    /// `AWS_*` environment, and checks that the bucket answers.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let root = url.trim_end_matches('/');
        let Some(path) = root.strip_prefix("s3://") else {
            anyhow::bail!(
                "--checkpoint-store {root}: only s3:// object stores are supported (S3 and S3-compatible stores such as MinIO, Ceph or R2)"
            );
        };
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        anyhow::ensure!(!bucket.is_empty(), "--checkpoint-store {root}: no bucket");
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url(root)
            .build()
            .map_err(|err| anyhow::anyhow!("--checkpoint-store {root}: {err}"))?;
        let prefix = Key::parse(prefix)
            .map_err(|err| anyhow::anyhow!("--checkpoint-store {root}: {err}"))?;
        let storage = Self::with_store(root, Arc::new(store), prefix);
        let probe = storage.store.list_with_delimiter(Some(&storage.prefix));
        match tokio::time::timeout(Duration::from_secs(30), probe).await {
            Ok(Ok(_)) => Ok(storage),
            Ok(Err(err)) => anyhow::bail!(
                "cannot reach the checkpoint store {root} (credentials, region and endpoint come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL): {err}"
            ),
            Err(_) => anyhow::bail!("the checkpoint store {root} did not answer within 30s"),
        }
    }

    pub fn with_store(root: &str, store: Arc<dyn ObjectStore>, prefix: Key) -> Self {
        Self {
            root: root.trim_end_matches('/').to_owned(),
            store,
            prefix,
        }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of a recorded checkpoint, if `location` lies in this job's part of the store.
    fn key(&self, location: &str, job: drover_core::JobId) -> Option<Key> {
        let rest = location
            .strip_prefix(self.root.as_str())?
            .strip_prefix('/')?;
        let mut parts = rest.split('/');
        if parts.next()? != job.0.to_string() {
            return None;
        }
        let plain = rest
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
        plain.then(|| rest.split('/').fold(self.prefix.clone(), |k, p| k.child(p)))
    }

    /// The objects of the checkpoint recorded at `location`: one (a file) or those under it (a
    /// directory). `None` when it is not in the store (any more).
    pub async fn entries(
        &self,
        location: &str,
        job: drover_core::JobId,
    ) -> anyhow::Result<Option<Vec<Entry>>> {
        let Some(key) = self.key(location, job) else {
            return Ok(None);
        };
        let objects: Vec<_> = self.store.list(Some(&key)).try_collect().await?;
        let mut entries = Vec::with_capacity(objects.len());
        for object in objects {
            let Some(parts) = object.location.prefix_match(&key) else {
                continue;
            };
            let name: Vec<String> = parts.map(|p| p.as_ref().to_owned()).collect();
            if name.iter().any(|p| p == ".." || p == ".") {
                continue;
            }
            entries.push(Entry {
                key: object.location,
                name,
                size: object.size,
            });
        }
        if entries.is_empty() {
            match self.store.head(&key).await {
                Ok(object) => entries.push(Entry {
                    key,
                    name: Vec::new(),
                    size: object.size,
                }),
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(err) => return Err(err.into()),
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(entries))
    }

    /// A tar archive of a directory checkpoint's objects (under `base/`) in an anonymous temporary
    /// file, rewound; each object streams from the store into it.
    pub async fn tar(&self, base: &str, entries: Vec<Entry>) -> anyhow::Result<std::fs::File> {
        let store = self.store.clone();
        let handle = tokio::runtime::Handle::current();
        let base = base.to_owned();
        tokio::task::spawn_blocking(move || -> anyhow::Result<std::fs::File> {
            use std::io::{Seek, SeekFrom};
            let mut builder = tar::Builder::new(tempfile::tempfile()?);
            for entry in entries {
                let object = handle.block_on(store.get(&entry.key))?;
                let stream = object.into_stream().map_err(std::io::Error::other);
                let reader = tokio_util::io::SyncIoBridge::new_with_handle(
                    tokio_util::io::StreamReader::new(stream),
                    handle.clone(),
                );
                let mut header = tar::Header::new_gnu();
                header.set_size(entry.size);
                header.set_mode(0o644);
                let mut path = std::path::PathBuf::from(&base);
                path.extend(&entry.name);
                builder.append_data(&mut header, path, reader)?;
            }
            let mut file = builder.into_inner()?;
            file.seek(SeekFrom::Start(0))?;
            Ok(file)
        })
        .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn a_checkpoint_is_found_by_its_location_within_its_job_only() {
        let job = drover_core::JobId(uuid::Uuid::new_v4());
        let other = drover_core::JobId(uuid::Uuid::new_v4());
        let store = Arc::new(InMemory::new());
        let storage = ObjectStorage::with_store("s3://b/ckpt/", store.clone(), Key::from("ckpt"));
        for (key, bytes) in [
            (
                format!("ckpt/{job}/g1/step-00000010/manifest.json"),
                &b"{}"[..],
            ),
            (
                format!("ckpt/{job}/g1/step-00000010/model.safetensors"),
                b"weights",
            ),
            (format!("ckpt/{job}/g1/file.bin"), b"file"),
            (
                format!("ckpt/{other}/g1/step-00000010/manifest.json"),
                b"other job",
            ),
        ] {
            store
                .put(&Key::from(key), bytes.to_vec().into())
                .await
                .unwrap();
        }
        let dir = storage
            .entries(&format!("s3://b/ckpt/{job}/g1/step-00000010"), job)
            .await
            .unwrap()
            .unwrap();
        let names: Vec<_> = dir.iter().map(|e| e.name.join("/")).collect();
        assert_eq!(names, ["manifest.json", "model.safetensors"]);
        let file = storage
            .entries(&format!("s3://b/ckpt/{job}/g1/file.bin"), job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((file.len(), file[0].size), (1, 4));
        for elsewhere in [
            format!("s3://b/ckpt/{other}/g1/step-00000010"),
            format!("s3://b/ckpt/{job}/../{other}/g1/step-00000010"),
            format!("s3://b/ckpt/{job}/g1/step-00000099"),
            format!("s3://other/ckpt/{job}/g1/step-00000010"),
            format!("/var/lib/drover/checkpoints/{job}/g1/step-00000010"),
        ] {
            assert!(
                storage.entries(&elsewhere, job).await.unwrap().is_none(),
                "{elsewhere}"
            );
        }

        let mut archive = tar::Archive::new(storage.tar("step-00000010", dir).await.unwrap());
        let mut found = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut body = String::new();
            std::io::Read::read_to_string(&mut entry, &mut body).unwrap();
            found.push((entry.path().unwrap().display().to_string(), body));
        }
        assert_eq!(
            found,
            [
                ("step-00000010/manifest.json".to_owned(), "{}".to_owned()),
                (
                    "step-00000010/model.safetensors".to_owned(),
                    "weights".to_owned()
                )
            ]
        );
    }
}
