//! A shard's side of checkpoints: its optimizer state restored from a whole checkpoint (any shape's,
//! sliced to this shard's pieces, every buffer's length checked first), and its own files of a new
//! one.

use crate::checkpoint::{self, Loaded};
use crate::dist::layout::{Layout, Slice};
use crate::optim::Optimizer;

/// Restores `optimizer`, made for this shard's `slices` (named `slice_names`), from `loaded`; a
/// checkpoint of another optimizer, or with a buffer of the wrong length, is refused.
pub(super) fn restore_optimizer(
    optimizer: &mut Optimizer,
    loaded: &Loaded,
    names: &[String],
    layout: &Layout,
    slices: &[Slice],
    slice_names: &[String],
) -> anyhow::Result<()> {
    let sizes: Vec<usize> = slices.iter().map(|s| s.len).collect();
    if loaded.manifest.optimizer != optimizer.kind() {
        anyhow::bail!(
            "the checkpoint was written by the {} optimizer; this job uses {}",
            loaded.manifest.optimizer,
            optimizer.kind()
        );
    }
    // Whole buffers of the wrong length are refused here: a slice of one that is too long
    // would pass for this shard's piece.
    for (key, buffer) in &loaded.optimizer {
        let Some((_, tensor)) = key.split_once('.') else {
            continue;
        };
        if let Some(t) = names.iter().position(|n| n == tensor)
            && buffer.len() != layout.sizes[t]
        {
            anyhow::bail!(
                "optimizer state: {key} has {} values, its parameter {}",
                buffer.len(),
                layout.sizes[t]
            );
        }
    }
    optimizer
        .restore(slice_names, &sizes, |key| {
            // `<state>.<tensor>@<offset>` is a piece of the whole `<state>.<tensor>`; other
            // keys (the step count) are whole.
            let Some((base, _)) = key.rsplit_once('@') else {
                return loaded.optimizer.get(key).cloned();
            };
            let (_, slice_name) = key.split_once('.')?;
            let slice = slices[slice_names.iter().position(|n| n == slice_name)?];
            let whole = loaded.optimizer.get(base)?;
            whole.get(slice.range()).map(<[f32]>::to_vec)
        })
        .map_err(|reason| anyhow::anyhow!("optimizer state: {reason}"))
}

/// A shard's files of a checkpoint, in memory: its slices (`model`, each named in `names` and holding
/// `params`) and their optimizer state.
pub(super) fn checkpoint_files(
    names: &[String],
    params: &[Vec<f32>],
    optimizer: &Optimizer,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let shapes: Vec<[usize; 1]> = params.iter().map(|p| [p.len()]).collect();
    let tensors: Vec<(&str, &[usize], &[f32])> = names
        .iter()
        .zip(&shapes)
        .zip(params)
        .map(|((n, s), v)| (n.as_str(), s.as_slice(), v.as_slice()))
        .collect();
    let model = checkpoint::tensors_bytes(&tensors)?;
    let optimizer = checkpoint::flat_bytes(&optimizer.state(names))?;
    Ok((model, optimizer))
}
