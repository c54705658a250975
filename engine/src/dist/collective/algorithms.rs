//! The algorithms, each over a group of the mesh's ranks (`members`, in order; this worker is
//! `members[me]`): ring reduce-scatter and all-gather (and all-reduce as the two), the binomial tree's
//! reduce and broadcast, recursive doubling, Rabenseifner's recursive halving then doubling, and the
//! hierarchical all-reduce (reduce inside each node, all-reduce among the nodes' leaders, broadcast
//! inside each node). Every rank of every algorithm ends with the same bits: each element is summed
//! once, in one order, and copied, or summed by two partners as `a + b` and `b + a`, which IEEE
//! addition makes equal. Groups whose size is not a power of two fold the surplus ranks into
//! partners first (recursive doubling and Rabenseifner), as MPICH does.

use super::algorithm::{Algorithm, floor_pow2};
use super::mesh::Mesh;
use std::ops::Range;

/// Elements `[i·n/parts, (i+1)·n/parts)`: block `i` of `parts` (sizes differ by at most one).
pub fn block(n: usize, parts: usize, i: usize) -> Range<usize> {
    (i * n / parts)..((i + 1) * n / parts)
}

/// Blocks `[first, last)` of `parts` as one range of elements.
fn blocks(n: usize, parts: usize, span: Range<usize>) -> Range<usize> {
    (span.start * n / parts)..(span.end * n / parts)
}

fn add(target: &mut [f32], incoming: &[f32]) {
    for (t, &x) in target.iter_mut().zip(incoming) {
        *t += x;
    }
}

/// `data[out]` to read and `data[into]` to write, for two ranges that do not overlap.
fn disjoint(data: &mut [f32], out: Range<usize>, into: Range<usize>) -> (&[f32], &mut [f32]) {
    debug_assert!(out.end <= into.start || into.end <= out.start);
    if out.start >= into.end {
        let (head, tail) = data.split_at_mut(out.start);
        (&tail[..out.len()], &mut head[into])
    } else {
        let (head, tail) = data.split_at_mut(into.start);
        (&head[out], &mut tail[..into.len()])
    }
}

fn scratch_of(scratch: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if scratch.len() < n {
        scratch.resize(n, 0.0);
    }
    &mut scratch[..n]
}

/// The lowest set bit of `x` (`x > 0`).
fn low_bit(x: usize) -> usize {
    x & x.wrapping_neg()
}

/// Ring reduce-scatter: afterwards `data[block(n, w, me)]` holds that block's sum over the group.
pub fn ring_reduce_scatter(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<()> {
    let (w, n) = (members.len(), data.len());
    if w == 1 {
        return Ok(());
    }
    let (next, prev) = (members[(me + 1) % w], members[(me + w - 1) % w]);
    let incoming = scratch_of(scratch, n.div_ceil(w) + 1);
    for s in 0..w - 1 {
        // Send block me − s − 1 and add the previous rank's copy of block me − s − 2: after w − 1
        // steps the block added last is this rank's own, summed over everyone.
        let out = block(n, w, (me + 2 * w - s - 1) % w);
        let into = block(n, w, (me + 2 * w - s - 2) % w);
        let incoming = &mut incoming[..into.len()];
        mesh.exchange(next, &data[out], prev, incoming)?;
        add(&mut data[into], incoming);
    }
    Ok(())
}

/// Ring all-gather: each rank starts with `data[block(n, w, me)]` and ends with every block.
pub fn ring_all_gather(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
) -> anyhow::Result<()> {
    let (w, n) = (members.len(), data.len());
    if w == 1 {
        return Ok(());
    }
    let (next, prev) = (members[(me + 1) % w], members[(me + w - 1) % w]);
    for s in 0..w - 1 {
        let out = block(n, w, (me + w - s) % w);
        let into = block(n, w, (me + 2 * w - s - 1) % w);
        let (out, into) = disjoint(data, out, into);
        mesh.exchange(next, out, prev, into)?;
    }
    Ok(())
}

/// Binomial-tree reduce: `members[0]` ends with the group's sum (the others' `data` with partial
/// sums). A rank's parent is its index with the lowest set bit cleared.
pub fn tree_reduce(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<()> {
    let w = members.len();
    let limit = if me == 0 { usize::MAX } else { low_bit(me) };
    let mut m = 1;
    while m < limit && me + m < w {
        let incoming = scratch_of(scratch, data.len());
        mesh.recv(members[me + m], incoming)?;
        add(data, incoming);
        m <<= 1;
    }
    if me != 0 {
        mesh.send(members[me - low_bit(me)], data)?;
    }
    Ok(())
}

/// Binomial-tree broadcast of `members[root]`'s `data` to the group (farthest subtree first).
pub fn tree_broadcast(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    root: usize,
    data: &mut [f32],
) -> anyhow::Result<()> {
    let w = members.len();
    let rel = (me + w - root) % w;
    let real = |r: usize| members[(r + root) % w];
    if rel != 0 {
        mesh.recv(real(rel - low_bit(rel)), data)?;
    }
    let mut m = if rel == 0 {
        w.next_power_of_two()
    } else {
        low_bit(rel)
    } / 2;
    while m >= 1 {
        if rel + m < w {
            mesh.send(real(rel + m), data)?;
        }
        m /= 2;
    }
    Ok(())
}

/// Folds a group of `w` into `p2 = floor_pow2(w)` active ranks: of the first `2(w − p2)`, each even
/// one hands its vector to the odd one after it and sits out. Returns this rank's index among the
/// active ranks, if it is one.
fn fold(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<Option<usize>> {
    let rem = members.len() - floor_pow2(members.len());
    if me >= 2 * rem {
        return Ok(Some(me - rem));
    }
    if me.is_multiple_of(2) {
        mesh.send(members[me + 1], data)?;
        Ok(None)
    } else {
        let incoming = scratch_of(scratch, data.len());
        mesh.recv(members[me - 1], incoming)?;
        add(data, incoming);
        Ok(Some(me / 2))
    }
}

/// The real rank of active index `x` after [`fold`].
fn active(members: &[usize], x: usize) -> usize {
    let rem = members.len() - floor_pow2(members.len());
    if x < rem {
        members[2 * x + 1]
    } else {
        members[x + rem]
    }
}

/// Hands the result back to the ranks [`fold`] set aside.
fn unfold(mesh: &mut Mesh, members: &[usize], me: usize, data: &mut [f32]) -> anyhow::Result<()> {
    let rem = members.len() - floor_pow2(members.len());
    if me < 2 * rem {
        if me % 2 == 1 {
            mesh.send(members[me - 1], data)?;
        } else {
            mesh.recv(members[me + 1], data)?;
        }
    }
    Ok(())
}

/// Recursive doubling (butterfly): log₂ p steps, each exchanging the whole vector with the partner
/// whose index differs in one bit.
pub fn recursive_doubling(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<()> {
    if members.len() == 1 {
        return Ok(());
    }
    let p2 = floor_pow2(members.len());
    if let Some(nr) = fold(mesh, members, me, data, scratch)? {
        let incoming = scratch_of(scratch, data.len());
        let mut mask = 1;
        while mask < p2 {
            let partner = active(members, nr ^ mask);
            mesh.exchange(partner, data, partner, incoming)?;
            add(data, incoming);
            mask <<= 1;
        }
    }
    unfold(mesh, members, me, data)
}

/// Rabenseifner's all-reduce: a reduce-scatter by recursive halving (each step sends half of what
/// is left to the partner and sums the other half), then an all-gather by recursive doubling.
pub fn rabenseifner(
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<()> {
    if members.len() == 1 {
        return Ok(());
    }
    let (n, p2) = (data.len(), floor_pow2(members.len()));
    if let Some(nr) = fold(mesh, members, me, data, scratch)? {
        let (mut lo, mut hi) = (0, p2);
        let mut mask = p2 / 2;
        while mask >= 1 {
            let partner = active(members, nr ^ mask);
            let mid = lo + mask;
            let (keep, give) = if nr & mask == 0 {
                (lo..mid, mid..hi)
            } else {
                (mid..hi, lo..mid)
            };
            let (keep_r, give_r) = (blocks(n, p2, keep.clone()), blocks(n, p2, give));
            let incoming = scratch_of(scratch, keep_r.len());
            mesh.exchange(partner, &data[give_r], partner, incoming)?;
            add(&mut data[keep_r], incoming);
            (lo, hi) = (keep.start, keep.end);
            mask /= 2;
        }
        debug_assert_eq!((lo, hi), (nr, nr + 1));
        let mut mask = 1;
        while mask < p2 {
            let partner = active(members, nr ^ mask);
            let theirs = if nr & mask == 0 {
                hi..hi + mask
            } else {
                lo - mask..lo
            };
            let (out, into) = disjoint(data, blocks(n, p2, lo..hi), blocks(n, p2, theirs.clone()));
            mesh.exchange(partner, out, partner, into)?;
            (lo, hi) = (lo.min(theirs.start), hi.max(theirs.end));
            mask <<= 1;
        }
    }
    unfold(mesh, members, me, data)
}

/// An all-reduce by one of the flat algorithms (not [`Algorithm::Hierarchical`]).
pub fn flat_allreduce(
    algorithm: Algorithm,
    mesh: &mut Mesh,
    members: &[usize],
    me: usize,
    data: &mut [f32],
    scratch: &mut Vec<f32>,
) -> anyhow::Result<()> {
    match algorithm {
        Algorithm::Ring => {
            ring_reduce_scatter(mesh, members, me, data, scratch)?;
            ring_all_gather(mesh, members, me, data)
        }
        Algorithm::Tree => {
            tree_reduce(mesh, members, me, data, scratch)?;
            tree_broadcast(mesh, members, me, 0, data)
        }
        Algorithm::RecursiveDoubling => recursive_doubling(mesh, members, me, data, scratch),
        Algorithm::Rabenseifner => rabenseifner(mesh, members, me, data, scratch),
        Algorithm::Hierarchical => anyhow::bail!("the hierarchical all-reduce is not a flat one"),
    }
}
