//! A worker's connections to the PS shards: one TCP connection per shard, all shards served at the same
//! time (one thread each), gradients written from and parameters read into the worker's own tensor
//! buffers without intermediate copies (unless a compressor encodes them).

use super::compress::{self, Compressor};
use super::layout::Layout;
use super::ps::shard_name;
use super::wire::{self, Hello, Kind};
use crate::checkpoint;
use crate::rng::Rng;
use anyhow::{Context, bail};
use drover_core::spec::Compression;
use std::io::{BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// What the shards answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Fresh parameters, as of this version (step).
    Params(u64),
    /// The job is over or stopping: stop after this step.
    Stop,
}

#[derive(Debug)]
struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    compressor: Option<Compressor>,
    encoded: Vec<u8>,
    /// The shard flagged the last parameters it sent with [`wire::FLUSH_NEXT`].
    flush_next: bool,
}

impl Conn {
    /// Reads one reply; parameters go into `targets`.
    fn reply(&mut self, targets: &mut [&mut [f32]]) -> anyhow::Result<Reply> {
        let header = wire::read_header(&mut self.reader)?;
        match header.kind {
            Kind::Params => {
                wire::read_into(&mut self.reader, header.len, targets)?;
                self.flush_next |= header.flags & wire::FLUSH_NEXT != 0;
                Ok(Reply::Params(header.step))
            }
            Kind::Stop => Ok(Reply::Stop),
            Kind::Refused => {
                let reason = wire::read_payload(&mut self.reader, header.len)?;
                bail!("the PS shard refused: {}", String::from_utf8_lossy(&reason))
            }
            other => bail!("the PS shard sent an unexpected {other:?} frame"),
        }
    }

    /// Reads an acknowledgement; returns what it carries (a checkpoint's files, or nothing).
    fn ack(&mut self) -> anyhow::Result<Vec<u8>> {
        let header = wire::read_header(&mut self.reader)?;
        let payload = wire::read_payload(&mut self.reader, header.len)?;
        if header.kind != Kind::Ack || header.flags != 0 {
            bail!("{}", String::from_utf8_lossy(&payload));
        }
        Ok(payload)
    }
}

/// A worker's side of the parameter servers.
#[derive(Debug)]
pub struct PsClient {
    layout: Layout,
    conns: Vec<Conn>,
    /// Gradient bytes this worker has put on the wire, and what they would have been uncompressed.
    pub bytes_pushed: u64,
    pub bytes_raw: u64,
    /// The next push goes out flushed (uncompressed, residual folded in): a shard asked for it.
    flush_next: bool,
    /// Every compressor's residual is zero: nothing has been pushed compressed since the start or
    /// the last flush. Always true without compression.
    flushed: bool,
}

impl PsClient {
    /// Connects to every shard (waiting up to `within` for each to listen) and introduces itself.
    pub fn connect(
        addresses: &[String],
        hello: &Hello,
        layout: Layout,
        compression: &Compression,
        momentum: f32,
        within: Duration,
    ) -> anyhow::Result<PsClient> {
        if addresses.len() != layout.shards.len() {
            bail!(
                "{} PS addresses for {} shards",
                addresses.len(),
                layout.shards.len()
            );
        }
        let mut conns = Vec::with_capacity(addresses.len());
        for (k, address) in addresses.iter().enumerate() {
            let stream = wire::connect(address, within)
                .with_context(|| format!("connecting to PS shard {k}"))?;
            let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
            let mut writer = BufWriter::with_capacity(1 << 20, stream);
            let json = serde_json::to_vec(hello)?;
            wire::write_frame(&mut writer, Kind::Hello, 0, 0, &[&json])?;
            writer.flush()?;
            let header = wire::read_header(&mut reader)
                .with_context(|| format!("PS shard {k} at {address} closed the connection"))?;
            let payload = wire::read_payload(&mut reader, header.len)?;
            match header.kind {
                Kind::Welcome => {}
                Kind::Refused => bail!(
                    "PS shard {k} at {address} refused: {}",
                    String::from_utf8_lossy(&payload)
                ),
                other => bail!("PS shard {k} answered hello with {other:?}"),
            }
            let compressor = match compression {
                Compression::None => None,
                scheme => {
                    let lens: Vec<usize> = layout.shards[k].iter().map(|s| s.len).collect();
                    let rng = Rng::derive(
                        u64::from(hello.rank) << 32 | k as u64,
                        0xC0_4E55 ^ hello.generation,
                    );
                    Some(Compressor::new(scheme.clone(), &lens, rng, momentum))
                }
            };
            conns.push(Conn {
                reader,
                writer,
                compressor,
                encoded: Vec::new(),
                flush_next: false,
            });
        }
        Ok(PsClient {
            layout,
            conns,
            bytes_pushed: 0,
            bytes_raw: 0,
            flush_next: false,
            flushed: true,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether the gradients are compressed (and so carry error-feedback residuals).
    pub fn compresses(&self) -> bool {
        self.conns.iter().any(|c| c.compressor.is_some())
    }

    /// Whether every residual is zero, so a checkpoint now holds everything this worker has pushed.
    pub fn residuals_flushed(&self) -> bool {
        self.flushed
    }

    /// The leader's announcement that a checkpoint follows: every worker (this one too) pushes the
    /// gradient of `step` flushed, so after that step's update no residual holds anything back.
    /// Under BSP the parameters after `step` are then a checkpoint that drops nothing.
    pub fn announce_flush(&mut self, step: u64) -> anyhow::Result<()> {
        for conn in &mut self.conns {
            wire::write_frame(&mut conn.writer, Kind::Flush, 0, step, &[])?;
            conn.writer.flush()?;
        }
        Ok(())
    }

    /// Takes the shards' flush flags from the replies just read.
    fn take_flush_flags(&mut self) {
        for conn in &mut self.conns {
            self.flush_next |= std::mem::take(&mut conn.flush_next);
        }
    }

    fn merge(replies: Vec<Reply>) -> Reply {
        if replies.contains(&Reply::Stop) {
            return Reply::Stop;
        }
        replies.into_iter().next().unwrap_or(Reply::Stop)
    }

    /// Fetches the parameters to compute `step` with into `params`.
    pub fn pull(&mut self, step: u64, params: &mut [Vec<f32>]) -> anyhow::Result<Reply> {
        let pieces = self.layout.split_mut(params);
        let replies = each(&mut self.conns, pieces, |_, conn, targets| {
            wire::write_frame(&mut conn.writer, Kind::Pull, 0, step, &[])?;
            conn.writer.flush()?;
            conn.reply(targets)
        })?;
        self.take_flush_flags();
        Ok(Self::merge(replies))
    }

    /// Pushes this worker's gradient of `step` (one buffer per tensor) and reads back the parameters
    /// for the next step into `params`. With `flush` (a checkpoint follows the step), or when a
    /// shard asked for it, the push goes out uncompressed with the residuals folded in.
    pub fn push_pull(
        &mut self,
        step: u64,
        grads: &[Vec<f32>],
        params: &mut [Vec<f32>],
        flush: bool,
    ) -> anyhow::Result<Reply> {
        let flush = flush || std::mem::take(&mut self.flush_next);
        let layout = &self.layout;
        let pushed = std::sync::atomic::AtomicU64::new(0);
        let pieces = layout.split_mut(params);
        let replies = {
            let run = |k: usize, conn: &mut Conn, targets: &mut [&mut [f32]]| {
                let slices = layout.gather(k, grads);
                match &mut conn.compressor {
                    None => {
                        let parts: Vec<&[u8]> = slices.iter().map(|s| wire::bytes(s)).collect();
                        let len: usize = parts.iter().map(|p| p.len()).sum();
                        wire::write_frame(
                            &mut conn.writer,
                            Kind::Push,
                            compress::RAW,
                            step,
                            &parts,
                        )?;
                        pushed.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    Some(compressor) => {
                        let tag = compressor.encode(&slices, flush, &mut conn.encoded);
                        wire::write_frame(
                            &mut conn.writer,
                            Kind::Push,
                            tag,
                            step,
                            &[&conn.encoded],
                        )?;
                        pushed.fetch_add(
                            conn.encoded.len() as u64,
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    }
                }
                conn.writer.flush()?;
                conn.reply(targets)
            };
            each(&mut self.conns, pieces, run)?
        };
        self.bytes_pushed += pushed.into_inner();
        self.bytes_raw += 4 * grads.iter().map(Vec::len).sum::<usize>() as u64;
        self.flushed = flush || !self.compresses();
        self.take_flush_flags();
        Ok(Self::merge(replies))
    }

    /// Asks every shard to write its part of the checkpoint being assembled in `dir`.
    pub fn checkpoint(&mut self, step: u64, dir: &Path) -> anyhow::Result<()> {
        for conn in &mut self.conns {
            wire::write_frame(&mut conn.writer, Kind::Checkpoint, 0, step, &[])?;
            conn.writer.flush()?;
        }
        for (index, conn) in self.conns.iter_mut().enumerate() {
            let files = conn.ack()?;
            let (model, optimizer) = split_files(&files)
                .with_context(|| format!("PS shard {index} sent a malformed checkpoint"))?;
            let (model_file, optimizer_file) = checkpoint::shard_files(&shard_name(index));
            checkpoint::write_bytes(&dir.join(model_file), model)?;
            checkpoint::write_bytes(&dir.join(optimizer_file), optimizer)?;
        }
        Ok(())
    }

    /// Tells every shard the job is over (or stopping): they answer the other workers with `Stop`.
    pub fn shutdown(&mut self, step: u64) -> anyhow::Result<()> {
        for conn in &mut self.conns {
            wire::write_frame(&mut conn.writer, Kind::Shutdown, 0, step, &[])?;
            conn.writer.flush()?;
        }
        for conn in &mut self.conns {
            conn.ack()?;
        }
        Ok(())
    }
}

/// A shard's checkpoint files from its acknowledgement: the model file's length (u64, little
/// endian), the model file, then the optimizer file.
fn split_files(payload: &[u8]) -> anyhow::Result<(&[u8], &[u8])> {
    let (len, rest) = payload
        .split_first_chunk::<8>()
        .ok_or_else(|| anyhow::anyhow!("{} bytes, no length", payload.len()))?;
    let len = usize::try_from(u64::from_le_bytes(*len))?;
    anyhow::ensure!(len <= rest.len(), "a model file longer than the payload");
    Ok(rest.split_at(len))
}

/// Runs `op` on every shard's connection with that shard's pieces of the parameters, all at once.
fn each<F>(conns: &mut [Conn], pieces: Vec<Vec<&mut [f32]>>, op: F) -> anyhow::Result<Vec<Reply>>
where
    F: Fn(usize, &mut Conn, &mut [&mut [f32]]) -> anyhow::Result<Reply> + Sync,
{
    if conns.len() == 1 {
        let mut pieces = pieces;
        return Ok(vec![op(0, &mut conns[0], &mut pieces[0])?]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .iter_mut()
            .zip(pieces)
            .enumerate()
            .map(|(k, (conn, mut pieces))| {
                let op = &op;
                scope.spawn(move || op(k, conn, &mut pieces))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a PS connection thread panicked")))
            })
            .collect()
    })
}
