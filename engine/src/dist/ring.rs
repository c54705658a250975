//! Ring all-reduce among a job's workers over TCP: each worker sends to the next rank and receives from
//! the previous one. The vector is cut into `w` chunks (sizes differ by at most one element when `w`
//! does not divide it); `w − 1` reduce-scatter steps leave each worker with one fully summed chunk and
//! `w − 1` all-gather steps hand every summed chunk round, so each worker sends `2(w − 1)·n/w` values.
//! Sending and receiving run at the same time (a thread per direction) so neither side's buffers fill.

use super::wire::{self, Kind};
use anyhow::{Context, bail};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

#[derive(Debug)]
pub struct Ring {
    rank: usize,
    world: usize,
    next: Option<BufWriter<TcpStream>>,
    prev: Option<BufReader<TcpStream>>,
    scratch: Vec<f32>,
}

/// The first bytes on a ring connection: the job's generation and the sender's rank.
fn greeting(generation: u64, rank: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&generation.to_le_bytes());
    b[8..].copy_from_slice(&(rank as u64).to_le_bytes());
    b
}

impl Ring {
    /// Joins the ring: connects to the next worker's address and accepts the previous worker on
    /// `listener`, both checked against the job's generation.
    pub fn connect(
        rank: usize,
        world: usize,
        generation: u64,
        listener: &TcpListener,
        addresses: &[String],
        within: Duration,
    ) -> anyhow::Result<Ring> {
        if world <= 1 {
            return Ok(Ring {
                rank,
                world: 1,
                next: None,
                prev: None,
                scratch: Vec::new(),
            });
        }
        if addresses.len() != world {
            bail!("{} worker addresses for a ring of {world}", addresses.len());
        }
        let next_rank = (rank + 1) % world;
        let prev_rank = (rank + world - 1) % world;
        let next_address = addresses[next_rank].clone();
        let dialer = std::thread::spawn(move || -> anyhow::Result<TcpStream> {
            let mut stream = wire::connect(&next_address, within)
                .with_context(|| format!("connecting to worker {next_rank}"))?;
            stream.write_all(&greeting(generation, rank))?;
            Ok(stream)
        });
        listener.set_nonblocking(false)?;
        let deadline = std::time::Instant::now() + within;
        let prev = loop {
            let (mut stream, _) = listener.accept()?;
            wire::tune(&stream)?;
            let mut b = [0u8; 16];
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let ok = stream.read_exact(&mut b).is_ok() && b == greeting(generation, prev_rank);
            stream.set_read_timeout(None)?;
            if ok {
                break stream;
            }
            // A stranger, or a task of another generation: drop it and keep waiting.
            if std::time::Instant::now() >= deadline {
                bail!("worker {prev_rank} of generation {generation} never joined the ring");
            }
        };
        let next = dialer
            .join()
            .map_err(|_| anyhow::anyhow!("the ring's dialer panicked"))??;
        Ok(Ring {
            rank,
            world,
            next: Some(BufWriter::with_capacity(1 << 20, next)),
            prev: Some(BufReader::with_capacity(1 << 20, prev)),
            scratch: Vec::new(),
        })
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Chunk `i` of a vector of `n` values.
    fn chunk(n: usize, world: usize, i: usize) -> std::ops::Range<usize> {
        (i * n / world)..((i + 1) * n / world)
    }

    /// Replaces `data` on every worker by the element-wise sum of everyone's `data`.
    pub fn allreduce(&mut self, data: &mut [f32]) -> anyhow::Result<()> {
        let (Some(next), Some(prev)) = (self.next.as_mut(), self.prev.as_mut()) else {
            return Ok(());
        };
        let (w, r, n) = (self.world, self.rank, data.len());
        self.scratch.resize(n.div_ceil(w) + 1, 0.0);
        for phase in 0..2 {
            for s in 0..w - 1 {
                // Reduce-scatter sends chunk r − s and receives r − s − 1 (adding it); all-gather
                // sends r + 1 − s and receives r − s (keeping it).
                let (send, recv) = if phase == 0 {
                    ((r + w - s) % w, (r + 2 * w - s - 1) % w)
                } else {
                    ((r + 1 + w - s) % w, (r + w - s) % w)
                };
                let send_range = Self::chunk(n, w, send);
                let recv_range = Self::chunk(n, w, recv);
                let incoming = &mut self.scratch[..recv_range.len()];
                let outgoing = &data[send_range];
                std::thread::scope(|scope| -> anyhow::Result<()> {
                    let sender = scope.spawn(|| -> std::io::Result<()> {
                        wire::write_frame(
                            next,
                            Kind::Chunk,
                            phase,
                            s as u64,
                            &[wire::bytes(outgoing)],
                        )?;
                        next.flush()
                    });
                    let header = wire::read_header(prev)?;
                    if header.kind != Kind::Chunk
                        || header.step != s as u64
                        || header.flags != phase
                    {
                        bail!(
                            "ring out of step: got {:?} {} {}",
                            header.kind,
                            header.flags,
                            header.step
                        );
                    }
                    wire::read_into(prev, header.len, &mut [&mut *incoming])?;
                    sender
                        .join()
                        .map_err(|_| anyhow::anyhow!("the ring's sender panicked"))??;
                    Ok(())
                })?;
                let target = &mut data[recv_range];
                if phase == 0 {
                    for (t, &x) in target.iter_mut().zip(incoming.iter()) {
                        *t += x;
                    }
                } else {
                    target.copy_from_slice(incoming);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_of(world: usize) -> Vec<Ring> {
        let listeners: Vec<TcpListener> = (0..world)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addresses: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = listeners
                .iter()
                .enumerate()
                .map(|(rank, listener)| {
                    let addresses = &addresses;
                    scope.spawn(move || {
                        Ring::connect(rank, world, 7, listener, addresses, Duration::from_secs(10))
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn allreduce_equals_a_local_sum_for_awkward_sizes() {
        for world in [2usize, 3, 4] {
            let mut rings = ring_of(world);
            for n in [1usize, 2, 5, 7, 1000, 100_003] {
                let inputs: Vec<Vec<f32>> = (0..world)
                    .map(|r| {
                        (0..n)
                            .map(|i| ((i * 7 + r * 13) % 17) as f32 - 8.0)
                            .collect()
                    })
                    .collect();
                let expected: Vec<f32> =
                    (0..n).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
                let outputs: Vec<Vec<f32>> = std::thread::scope(|scope| {
                    let handles: Vec<_> = rings
                        .iter_mut()
                        .zip(inputs.clone())
                        .map(|(ring, mut data)| {
                            scope.spawn(move || {
                                ring.allreduce(&mut data).unwrap();
                                data
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                for out in outputs {
                    assert_eq!(out, expected, "world {world}, n {n}");
                }
            }
        }
    }
}
