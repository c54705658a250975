//! Assignment of a model's parameter blocks (tensors) to PS shards, balancing both the bytes each shard
//! holds (and so the update work it does) and the number of connections it serves: Optimus's parameter
//! assignment algorithm (PAA).
//!
//! Largest block first: tiny blocks (< 1/(100·shards) of the model) go to the shard with the fewest
//! slices; blocks no larger than the average share (model / shards) are best-fitted into shards of that
//! capacity; larger blocks are split, each piece filling the least-loaded shard up to the average.

/// One tensor: its name and number of elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub name: String,
    pub len: u64,
}

/// A contiguous piece of a block, by index into the input: elements `offset..offset + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSlice {
    pub block: usize,
    pub offset: u64,
    pub len: u64,
}

/// Slices per shard; every element of every block is assigned exactly once.
pub fn assign_blocks(blocks: &[Block], shards: u32) -> Vec<Vec<BlockSlice>> {
    let shards = shards.max(1) as usize;
    let mut assignment: Vec<Vec<BlockSlice>> = vec![Vec::new(); shards];
    let mut load = vec![0u64; shards];
    let total: u64 = blocks.iter().map(|b| b.len).sum();
    if total == 0 {
        return assignment;
    }
    let average = total.div_ceil(shards as u64);
    let tiny = total / (100 * shards as u64);
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].len > 0).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(blocks[i].len), i));
    for i in order {
        let len = blocks[i].len;
        if len < tiny {
            let shard = (0..shards)
                .min_by_key(|&s| (assignment[s].len(), load[s], s))
                .unwrap_or(0);
            assignment[shard].push(BlockSlice {
                block: i,
                offset: 0,
                len,
            });
            load[shard] += len;
        } else if len <= average {
            // Best fit: the fullest shard that still has room; else the least loaded.
            let shard = (0..shards)
                .filter(|&s| load[s] + len <= average)
                .max_by_key(|&s| (load[s], std::cmp::Reverse(s)))
                .or_else(|| (0..shards).min_by_key(|&s| (load[s], s)))
                .unwrap_or(0);
            assignment[shard].push(BlockSlice {
                block: i,
                offset: 0,
                len,
            });
            load[shard] += len;
        } else {
            let mut offset = 0;
            while offset < len {
                let shard = (0..shards).min_by_key(|&s| (load[s], s)).unwrap_or(0);
                let remaining = len - offset;
                let room = average.saturating_sub(load[shard]);
                let piece = if room > 0 {
                    room.min(remaining)
                } else {
                    remaining.div_ceil(shards as u64)
                };
                assignment[shard].push(BlockSlice {
                    block: i,
                    offset,
                    len: piece,
                });
                load[shard] += piece;
                offset += piece;
            }
        }
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp_blocks() -> Vec<Block> {
        // A 784-512-256-10 MLP: weights and biases.
        [
            ("w1", 784 * 512),
            ("b1", 512),
            ("w2", 512 * 256),
            ("b2", 256),
            ("w3", 256 * 10),
            ("b3", 10),
        ]
        .into_iter()
        .map(|(name, len)| Block {
            name: name.to_owned(),
            len,
        })
        .collect()
    }

    fn loads(assignment: &[Vec<BlockSlice>]) -> Vec<u64> {
        assignment
            .iter()
            .map(|s| s.iter().map(|x| x.len).sum())
            .collect()
    }

    #[test]
    fn every_element_is_assigned_exactly_once() {
        for shards in 1..=7 {
            let blocks = mlp_blocks();
            let assignment = assign_blocks(&blocks, shards);
            for (i, block) in blocks.iter().enumerate() {
                let mut pieces: Vec<(u64, u64)> = assignment
                    .iter()
                    .flatten()
                    .filter(|s| s.block == i)
                    .map(|s| (s.offset, s.len))
                    .collect();
                pieces.sort_unstable();
                let mut next = 0;
                for (offset, len) in pieces {
                    assert_eq!(offset, next, "{} with {shards} shards", block.name);
                    next += len;
                }
                assert_eq!(next, block.len);
            }
        }
    }

    #[test]
    fn loads_are_balanced_where_naive_placement_is_not() {
        let blocks = mlp_blocks();
        let total: u64 = blocks.iter().map(|b| b.len).sum();
        for shards in [2u32, 3, 4] {
            let loads = loads(&assign_blocks(&blocks, shards));
            let max = *loads.iter().max().unwrap();
            // Within 2% of a perfect split (tiny blocks go where connections are fewest, not where load is least).
            assert!(
                max as f64 <= 1.02 * total.div_ceil(u64::from(shards)) as f64,
                "{shards}: {loads:?}"
            );
        }
        // Whole blocks round-robin would put w1 (78% of the model) on one shard.
        assert!(784 * 512 * 100 / total > 70);
    }
}
