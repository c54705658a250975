//! Checkpoints as ARCHITECTURE.md pins them: a directory `step-NNNNNNNN/` holding the model's tensors
//! (`model.safetensors`), the optimizer state (`optimizer.safetensors`) and `manifest.json` (step, RNG
//! state, data cursor, job shape, the map from tensors to shards, metrics). Written under a temporary
//! name, fsynced, then renamed, so a crash never leaves a half checkpoint that looks whole. Retention
//! keeps the last `k` and the best `b` by the validation metric.

use crate::data::Cursor;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

pub const FORMAT_VERSION: u32 = 1;
pub const MODEL_FILE: &str = "model.safetensors";
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io {
        path: path.display().to_string(),
        error,
    }
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Invalid {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
}

/// Which tensors each parameter-server shard holds (one `local` shard for a single worker or an
/// all-reduce job). A PS shard `ps-K` writes its own files, `ps-K.model.safetensors` and
/// `ps-K.optimizer.safetensors`, holding its slices under `<tensor>@<offset>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub name: String,
    pub tensors: Vec<String>,
    /// The pieces of tensors this shard holds (empty for the `local` shard, which holds them whole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<ShardSlice>,
}

/// Elements `offset..offset + len` of a tensor (flattened).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSlice {
    pub tensor: String,
    pub offset: u64,
    pub len: u64,
}

/// The files a PS shard writes into a checkpoint.
pub fn shard_files(shard: &str) -> (String, String) {
    (
        format!("{shard}.model.safetensors"),
        format!("{shard}.optimizer.safetensors"),
    )
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub step: u64,
    pub seed: u64,
    /// The dropout RNG's state.
    pub rng: [u64; 4],
    pub cursor: Cursor,
    pub workers: u32,
    pub ps: u32,
    pub optimizer: String,
    pub tensors: Vec<TensorInfo>,
    pub shards: Vec<Shard>,
    /// The last metrics before the checkpoint (validation metrics included when they were measured).
    pub metrics: BTreeMap<String, f64>,
    /// The model spec, so a restore into a different model is refused.
    pub model: serde_json::Value,
}

/// A flat f32 buffer as a safetensors view, without copying.
struct F32View<'a> {
    shape: &'a [usize],
    values: &'a [f32],
}

impl safetensors::View for F32View<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        if cfg!(target_endian = "little") {
            Cow::Borrowed(bytemuck::cast_slice(self.values))
        } else {
            Cow::Owned(self.values.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
    }
    fn data_len(&self) -> usize {
        self.values.len() * 4
    }
}

fn sync_file(path: &Path) -> Result<(), CheckpointError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Writes named flat tensors to one safetensors file and fsyncs it.
pub fn write_tensors(
    path: &Path,
    tensors: &[(&str, &[usize], &[f32])],
) -> Result<(), CheckpointError> {
    let views = tensors
        .iter()
        .map(|(name, shape, values)| (*name, F32View { shape, values }));
    safetensors::serialize_to_file(views, None, path).map_err(|err| invalid(path, err))?;
    sync_file(path)
}

/// A checkpoint being written: its files go into a temporary directory that [`commit`] renames.
#[derive(Debug)]
pub struct Pending {
    dir: PathBuf,
    tmp: PathBuf,
    final_path: PathBuf,
}

impl Pending {
    /// Where the checkpoint's files are written before the commit.
    pub fn path(&self) -> &Path {
        &self.tmp
    }
}

/// Starts a checkpoint of `step` in `dir` (as `step-NNNNNNNN` once committed).
pub fn begin(dir: &Path, step: u64) -> Result<Pending, CheckpointError> {
    let name = format!("step-{step:08}");
    let final_path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    Ok(Pending {
        dir: dir.to_path_buf(),
        tmp,
        final_path,
    })
}

/// Writes named flat buffers (optimizer state) as 1-D tensors to one safetensors file.
pub fn write_flat(path: &Path, buffers: &[(String, Vec<f32>)]) -> Result<(), CheckpointError> {
    write_tensors(path, &flat_views(buffers, &flat_shapes(buffers)))
}

fn flat_shapes(buffers: &[(String, Vec<f32>)]) -> Vec<[usize; 1]> {
    buffers.iter().map(|(_, v)| [v.len()]).collect()
}

fn flat_views<'a>(
    buffers: &'a [(String, Vec<f32>)],
    shapes: &'a [[usize; 1]],
) -> Vec<(&'a str, &'a [usize], &'a [f32])> {
    buffers
        .iter()
        .zip(shapes)
        .map(|((n, v), s)| (n.as_str(), s.as_slice(), v.as_slice()))
        .collect()
}

/// A safetensors file's bytes in memory: what a PS shard sends the worker that assembles a
/// checkpoint, which need not share a filesystem with it.
pub fn tensors_bytes(tensors: &[(&str, &[usize], &[f32])]) -> Result<Vec<u8>, CheckpointError> {
    let views = tensors
        .iter()
        .map(|(name, shape, values)| (*name, F32View { shape, values }));
    safetensors::serialize(views, None).map_err(|err| invalid(Path::new("<in memory>"), err))
}

/// [`tensors_bytes`] of named flat buffers.
pub fn flat_bytes(buffers: &[(String, Vec<f32>)]) -> Result<Vec<u8>, CheckpointError> {
    tensors_bytes(&flat_views(buffers, &flat_shapes(buffers)))
}

/// Writes a file's bytes and fsyncs it.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    std::fs::write(path, bytes).map_err(io(path))?;
    sync_file(path)
}

/// Writes the manifest and makes the checkpoint durable under its final name; returns that path.
pub fn commit(pending: Pending, manifest: &Manifest) -> Result<PathBuf, CheckpointError> {
    let Pending {
        dir,
        tmp,
        final_path,
    } = pending;
    let manifest_path = tmp.join(MANIFEST_FILE);
    let json = serde_json::to_vec_pretty(manifest).map_err(|err| invalid(&manifest_path, err))?;
    std::fs::write(&manifest_path, json).map_err(io(&manifest_path))?;
    sync_file(&manifest_path)?;
    sync_file(&tmp)?;
    if final_path.exists() {
        // The same step written again (a resumed run reaching it): the new one replaces it.
        std::fs::remove_dir_all(&final_path).map_err(io(&final_path))?;
    }
    std::fs::rename(&tmp, &final_path).map_err(io(&final_path))?;
    sync_file(&dir)?;
    Ok(final_path)
}

/// Writes a whole (single-shard) checkpoint into `dir` as `step-NNNNNNNN`; returns its path once it is
/// durable.
pub fn save(
    dir: &Path,
    manifest: &Manifest,
    params: &[(&str, &[usize], &[f32])],
    optimizer: &[(String, Vec<f32>)],
) -> Result<PathBuf, CheckpointError> {
    let pending = begin(dir, manifest.step)?;
    write_tensors(&pending.path().join(MODEL_FILE), params)?;
    write_flat(&pending.path().join(OPTIMIZER_FILE), optimizer)?;
    commit(pending, manifest)
}

/// A loaded checkpoint.
#[derive(Debug)]
pub struct Loaded {
    pub manifest: Manifest,
    pub params: BTreeMap<String, Vec<f32>>,
    pub optimizer: BTreeMap<String, Vec<f32>>,
}

fn read_tensors(path: &Path) -> Result<BTreeMap<String, Vec<f32>>, CheckpointError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let tensors =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|err| invalid(path, err))?;
    tensors
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(invalid(path, format!("{name} is not f32")));
            }
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Ok((name, values))
        })
        .collect()
}

/// Loads a checkpoint; one written by PS shards is assembled into whole tensors (and whole optimizer
/// buffers), so any shape can resume from it.
pub fn load(path: &Path) -> Result<Loaded, CheckpointError> {
    let manifest_path = path.join(MANIFEST_FILE);
    let bytes = std::fs::read(&manifest_path).map_err(io(&manifest_path))?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|err| invalid(&manifest_path, err))?;
    if manifest.format_version != FORMAT_VERSION {
        return Err(invalid(
            &manifest_path,
            format!("format {} is not {FORMAT_VERSION}", manifest.format_version),
        ));
    }
    if manifest.shards.iter().all(|s| s.slices.is_empty()) {
        return Ok(Loaded {
            params: read_tensors(&path.join(MODEL_FILE))?,
            optimizer: read_tensors(&path.join(OPTIMIZER_FILE))?,
            manifest,
        });
    }
    let sizes: BTreeMap<&str, usize> = manifest
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.iter().product()))
        .collect();
    let mut params = BTreeMap::new();
    let mut optimizer = BTreeMap::new();
    for shard in &manifest.shards {
        let (model_file, optimizer_file) = shard_files(&shard.name);
        for (file, into, state) in [
            (model_file, &mut params, false),
            (optimizer_file, &mut optimizer, true),
        ] {
            let file = path.join(file);
            for (key, values) in read_tensors(&file)? {
                let Some((base, offset)) = key.rsplit_once('@') else {
                    // Whole values (the optimizer's step count): the same on every shard.
                    into.insert(key, values);
                    continue;
                };
                let offset: usize = offset
                    .parse()
                    .map_err(|_| invalid(&file, format!("{key}: bad offset")))?;
                let tensor = if state {
                    base.split_once('.').map_or(base, |(_, t)| t)
                } else {
                    base
                };
                let size = *sizes
                    .get(tensor)
                    .ok_or_else(|| invalid(&file, format!("{key}: no tensor {tensor}")))?;
                if offset + values.len() > size {
                    return Err(invalid(&file, format!("{key} runs past {tensor}")));
                }
                let whole = into
                    .entry(base.to_owned())
                    .or_insert_with(|| vec![0.0f32; size]);
                whole[offset..offset + values.len()].copy_from_slice(&values);
            }
        }
    }
    for name in sizes.keys() {
        if !params.contains_key(*name) {
            return Err(invalid(path, format!("no shard holds {name}")));
        }
    }
    Ok(Loaded {
        manifest,
        params,
        optimizer,
    })
}

/// Deletes checkpoints in `dir` beyond the newest `keep_last` and the best `keep_best` by `metric`
/// (higher is better when `maximise`). Returns the deleted paths.
pub fn retain(
    dir: &Path,
    keep_last: usize,
    keep_best: usize,
    metric: &str,
    maximise: bool,
) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut checkpoints: Vec<(u64, PathBuf, Option<f64>)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("step-")?.parse::<u64>().ok()?;
            let metric = std::fs::read(e.path().join(MANIFEST_FILE))
                .ok()
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
                .and_then(|m| m.metrics.get(metric).copied());
            Some((step, e.path(), metric))
        })
        .collect();
    checkpoints.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut keep: Vec<bool> = (0..checkpoints.len())
        .map(|i| i < keep_last.max(1))
        .collect();
    let mut by_metric: Vec<usize> = (0..checkpoints.len())
        .filter(|&i| checkpoints[i].2.is_some())
        .collect();
    by_metric.sort_by(|&a, &b| {
        let (x, y) = (
            checkpoints[a].2.unwrap_or(0.0),
            checkpoints[b].2.unwrap_or(0.0),
        );
        if maximise {
            y.total_cmp(&x)
        } else {
            x.total_cmp(&y)
        }
    });
    for &i in by_metric.iter().take(keep_best) {
        keep[i] = true;
    }
    let mut deleted = Vec::new();
    for (i, (_, path, _)) in checkpoints.into_iter().enumerate() {
        if !keep[i] && std::fs::remove_dir_all(&path).is_ok() {
            deleted.push(path);
        }
    }
    deleted
}
