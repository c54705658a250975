//! The data order: a shuffle that depends only on (seed, epoch), so a checkpoint needs only the cursor
//! (epoch, position) to resume it; each worker takes its slice of every global batch by rank.

use crate::rng::Rng;

/// Where the data order stands: the epoch and the position in that epoch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub epoch: u64,
    pub position: u64,
}

/// The order of `n` samples in `epoch`: a shuffle that depends only on (seed, epoch).
pub fn epoch_order(seed: u64, epoch: u64, n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    Rng::derive(seed, 0xDA7A_0000_0000 ^ epoch).shuffle(&mut order);
    order
}

/// Draws global batches from a shuffled order and hands each worker its slice.
#[derive(Debug)]
pub struct Sampler {
    seed: u64,
    n: usize,
    cursor: Cursor,
    order: Vec<u32>,
}

impl Sampler {
    pub fn new(seed: u64, n: usize, cursor: Cursor) -> Self {
        let order = epoch_order(seed, cursor.epoch, n);
        Self {
            seed,
            n,
            cursor,
            order,
        }
    }

    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// The next global batch of `batch` samples (crossing into the next epoch when this one runs out),
    /// and this worker's slice of it: samples `[rank·B/w, (rank+1)·B/w)`.
    pub fn next(&mut self, batch: usize, rank: usize, world: usize) -> Vec<u32> {
        let mut global = Vec::with_capacity(batch);
        while global.len() < batch {
            if self.cursor.position as usize >= self.n {
                self.cursor = Cursor {
                    epoch: self.cursor.epoch + 1,
                    position: 0,
                };
                self.order = epoch_order(self.seed, self.cursor.epoch, self.n);
            }
            let start = self.cursor.position as usize;
            let take = (batch - global.len()).min(self.n - start);
            global.extend_from_slice(&self.order[start..start + take]);
            self.cursor.position += take as u64;
        }
        let from = rank * batch / world;
        let to = (rank + 1) * batch / world;
        global[from..to].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_split_every_global_batch_and_resume_from_the_cursor() {
        let mut whole = Sampler::new(5, 10, Cursor::default());
        let first: Vec<u32> = whole.next(4, 0, 1);
        let mut a = Sampler::new(5, 10, Cursor::default());
        let mut b = Sampler::new(5, 10, Cursor::default());
        let mut shares = a.next(4, 0, 2);
        shares.extend(b.next(4, 1, 2));
        assert_eq!(shares, first);
        // 10 samples, batches of 4: the third batch crosses into epoch 1.
        whole.next(4, 0, 1);
        let cursor = whole.cursor();
        let third = whole.next(4, 0, 1);
        assert_eq!(
            whole.cursor(),
            Cursor {
                epoch: 1,
                position: 2
            }
        );
        assert_eq!(Sampler::new(5, 10, cursor).next(4, 0, 1), third);
    }
}
