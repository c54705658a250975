//! The sums a pipeline's workers do in groups (a stage's workers over the replicas, a
//! tensor-parallel group) and the hand-over between neighbouring stages, over the job's mesh.

use crate::dist::collective::cost::{self, Shape};
use crate::dist::collective::{Algorithm, Communicator};
use crate::models::Reducer;

/// Sends `out` to `peer`, receiving `into` from it at the same time when given (so that two
/// neighbours each sending the other something never wait on each other).
pub(super) fn hand_over(
    communicator: &mut Communicator,
    peer: usize,
    out: &[f32],
    into: Option<&mut [f32]>,
) -> anyhow::Result<()> {
    match into {
        Some(into) => communicator.mesh().exchange(peer, out, peer, into),
        None => communicator.mesh().send(peer, out),
    }
}

/// The algorithm chosen for each of the last few message sizes of a group's sums (a step sums
/// one or two sizes, many times: choosing allocates).
#[derive(Debug, Default)]
struct Plans(Vec<(usize, Algorithm)>);

impl Plans {
    fn algorithm(
        &mut self,
        communicator: &Communicator,
        shape: &Shape,
        fixed: Option<Algorithm>,
        bytes: usize,
    ) -> Algorithm {
        if let Some(algorithm) = fixed.filter(|a| *a != Algorithm::Hierarchical) {
            return algorithm;
        }
        if let Some(&(_, algorithm)) = self.0.iter().find(|p| p.0 == bytes) {
            return algorithm;
        }
        let algorithm = communicator.choose_flat(shape, bytes);
        if self.0.len() == 4 {
            self.0.remove(0);
        }
        self.0.push((bytes, algorithm));
        algorithm
    }
}

/// Workers that sum together (a stage's workers over every replica, or one tensor-parallel group),
/// with their shape and the algorithms chosen for the sizes they sum.
#[derive(Debug)]
pub(super) struct Group {
    members: Vec<usize>,
    shape: Shape,
    plans: Plans,
}

impl Group {
    /// The group of `members`, on the nodes `node_of` names (by rank).
    pub fn new(members: Vec<usize>, node_of: &[usize]) -> Group {
        let nodes: Vec<usize> = members.iter().map(|&r| node_of[r]).collect();
        Group {
            shape: Shape::of(&nodes),
            members,
            plans: Plans::default(),
        }
    }

    /// Replaces `data` on every member by their element-wise sum, by `fixed` where it is a flat
    /// algorithm, else the one predicted fastest for the size; returns the bytes this worker sent.
    pub fn sum(
        &mut self,
        communicator: &mut Communicator,
        fixed: Option<Algorithm>,
        data: &mut [f32],
    ) -> anyhow::Result<u64> {
        if self.members.len() < 2 {
            return Ok(0);
        }
        let bytes = data.len() * 4;
        let algorithm = self
            .plans
            .algorithm(communicator, &self.shape, fixed, bytes);
        let used =
            communicator.allreduce_among(&self.members, &self.shape, Some(algorithm), data)?;
        Ok(cost::bytes_per_worker(used, Algorithm::Ring, &self.shape, bytes as f64) as u64)
    }

    /// This group's sums as the model's [`Reducer`], counting the bytes sent into `bytes`.
    pub fn reducer<'a>(
        &'a mut self,
        communicator: &'a mut Communicator,
        fixed: Option<Algorithm>,
        bytes: &'a mut u64,
    ) -> TensorSum<'a> {
        TensorSum {
            group: self,
            communicator,
            fixed,
            bytes,
        }
    }
}

/// A tensor-parallel group's sums, over the job's mesh.
pub(super) struct TensorSum<'a> {
    group: &'a mut Group,
    communicator: &'a mut Communicator,
    fixed: Option<Algorithm>,
    bytes: &'a mut u64,
}

impl Reducer for TensorSum<'_> {
    fn sum(&mut self, data: &mut [f32]) -> candle_core::Result<()> {
        *self.bytes += self
            .group
            .sum(self.communicator, self.fixed, data)
            .map_err(|e| {
                candle_core::Error::Msg(format!("summing over the tensor-parallel group: {e:#}"))
            })?;
        Ok(())
    }
}
