//! Which slices of which tensors each PS shard holds: the model's tensors split among the shards by
//! the scheduler's Optimus assignment, with a fingerprint both ends of a connection compare.

use drover_core::blocks::{Block, assign_blocks};

/// One piece of a tensor held by a PS shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub tensor: usize,
    pub offset: usize,
    pub len: usize,
}

impl Slice {
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// Which slices of which tensors each PS shard holds: Optimus's assignment (bytes and update work
/// balanced, large tensors split), the same on every task because it depends only on the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub shards: Vec<Vec<Slice>>,
    /// Elements per tensor.
    pub sizes: Vec<usize>,
}

impl Layout {
    pub fn new(names: &[String], sizes: &[usize], shards: u32) -> Self {
        let blocks: Vec<Block> = names
            .iter()
            .zip(sizes)
            .map(|(name, &len)| Block {
                name: name.clone(),
                len: len as u64,
            })
            .collect();
        let shards = assign_blocks(&blocks, shards)
            .into_iter()
            .map(|slices| {
                slices
                    .into_iter()
                    .map(|s| Slice {
                        tensor: s.block,
                        offset: s.offset as usize,
                        len: s.len as usize,
                    })
                    .collect()
            })
            .collect();
        Self {
            shards,
            sizes: sizes.to_vec(),
        }
    }

    /// Elements shard `k` holds.
    pub fn shard_len(&self, k: usize) -> usize {
        self.shards[k].iter().map(|s| s.len).sum()
    }

    /// A fingerprint both ends of a connection compare, so a worker and a PS built from different
    /// models never exchange tensors.
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        let mut mix = |x: u64| {
            h ^= x;
            h = h.wrapping_mul(0x0100_0000_01B3);
        };
        for &s in &self.sizes {
            mix(s as u64);
        }
        for shard in &self.shards {
            mix(u64::MAX);
            for s in shard {
                mix(s.tensor as u64);
                mix(s.offset as u64);
                mix(s.len as u64);
            }
        }
        h
    }

    /// Shard `k`'s pieces of `values` (one buffer per tensor), in the shard's order.
    pub fn gather<'a>(&self, k: usize, values: &'a [Vec<f32>]) -> Vec<&'a [f32]> {
        self.shards[k]
            .iter()
            .map(|s| &values[s.tensor][s.range()])
            .collect()
    }

    /// Splits `values` (one buffer per tensor) into every shard's disjoint mutable pieces, each shard's
    /// in its own order, so the shards' connections can fill them at the same time.
    pub fn split_mut<'a>(&self, values: &'a mut [Vec<f32>]) -> Vec<Vec<&'a mut [f32]>> {
        let mut out: Vec<Vec<Option<&'a mut [f32]>>> = self
            .shards
            .iter()
            .map(|s| (0..s.len()).map(|_| None).collect())
            .collect();
        let mut by_tensor: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); values.len()];
        for (k, shard) in self.shards.iter().enumerate() {
            for (j, s) in shard.iter().enumerate() {
                by_tensor[s.tensor].push((s.offset, k, j));
            }
        }
        for (tensor, mut rest) in values.iter_mut().map(|v| v.as_mut_slice()).enumerate() {
            let pieces = &mut by_tensor[tensor];
            pieces.sort_unstable();
            let mut at = 0;
            for &(offset, k, j) in pieces.iter() {
                let len = self.shards[k][j].len;
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(offset - at);
                let (piece, tail) = tail.split_at_mut(len);
                out[k][j] = Some(piece);
                rest = tail;
                at = offset + len;
            }
        }
        out.into_iter()
            .map(|shard| shard.into_iter().flatten().collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_lands_in_exactly_one_shard_piece() {
        let names: Vec<String> = ["w1", "b1", "w2", "b2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let sizes = [1000usize, 10, 300, 3];
        let layout = Layout::new(&names, &sizes, 3);
        let mut values: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
        for (k, pieces) in layout.split_mut(&mut values).into_iter().enumerate() {
            assert_eq!(pieces.len(), layout.shards[k].len());
            for piece in pieces {
                for x in piece.iter_mut() {
                    *x += 1.0 + k as f32;
                }
            }
        }
        for (k, shard) in layout.shards.iter().enumerate() {
            for s in shard {
                assert!(
                    values[s.tensor][s.range()]
                        .iter()
                        .all(|&x| x == 1.0 + k as f32)
                );
            }
        }
        assert_eq!(
            (0..3).map(|k| layout.shard_len(k)).sum::<usize>(),
            sizes.iter().sum::<usize>()
        );
        assert_ne!(
            layout.fingerprint(),
            Layout::new(&names, &sizes, 2).fingerprint()
        );
    }
}
