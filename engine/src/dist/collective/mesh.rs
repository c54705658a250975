//! The connections under the collectives: one TCP connection between every pair of a job's workers
//! (the higher rank dials the lower, which accepts; each connection opens with the job's generation
//! and the dialer's rank, and anything else is dropped), and the point-to-point moves every algorithm
//! is made of — send, receive, and both at once with one peer or two. Every message between a pair
//! carries that pair's running count, so an algorithm that got out of step fails with a clear error
//! instead of summing the wrong chunks. Sending and receiving at once runs on the caller's thread:
//! both sockets go non-blocking for the exchange and `poll(2)` waits while neither can move (two
//! peers that each wrote a large message before reading would otherwise block each other; a second
//! thread per exchange cost milliseconds whenever the host had more busy threads than cores).

use crate::dist::wire::{self, Kind};
use anyhow::{Context, bail};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Each connection's user-space buffers (larger writes and reads bypass them).
const BUFFER_BYTES: usize = 256 << 10;

/// The frame flag every collective message carries.
const COLLECTIVE: u32 = 0x436f_6c6c;

#[derive(Debug)]
pub struct Mesh {
    rank: usize,
    world: usize,
    /// Writing and reading halves of the connection to each peer (`None` for this rank).
    tx: Vec<Option<BufWriter<TcpStream>>>,
    rx: Vec<Option<BufReader<TcpStream>>>,
    /// Messages sent to / received from each peer so far.
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// The first bytes on a mesh connection: the job's generation and the dialer's rank.
fn greeting(generation: u64, rank: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&generation.to_le_bytes());
    b[8..].copy_from_slice(&(rank as u64).to_le_bytes());
    b
}

impl Mesh {
    /// A mesh of one: every collective is a no-op.
    pub fn single() -> Mesh {
        Mesh {
            rank: 0,
            world: 1,
            tx: vec![None],
            rx: vec![None],
            sent: vec![0],
            received: vec![0],
        }
    }

    /// Joins the mesh of `addresses.len()` workers as `rank`: dials every lower rank's address and
    /// accepts every higher rank on `listener`, each checked against the job's `generation`.
    pub fn connect(
        rank: usize,
        generation: u64,
        listener: &TcpListener,
        addresses: &[String],
        within: Duration,
    ) -> anyhow::Result<Mesh> {
        let world = addresses.len();
        if world <= 1 {
            return Ok(Mesh::single());
        }
        if rank >= world {
            bail!("rank {rank} in a mesh of {world}");
        }
        let lower: Vec<(usize, String)> = addresses[..rank].iter().cloned().enumerate().collect();
        let dialer = std::thread::spawn(move || -> anyhow::Result<Vec<(usize, TcpStream)>> {
            lower
                .into_iter()
                .map(|(peer, address)| {
                    let mut stream = wire::connect(&address, within)
                        .with_context(|| format!("connecting to worker {peer}"))?;
                    stream.write_all(&greeting(generation, rank))?;
                    Ok((peer, stream))
                })
                .collect()
        });
        let mut streams: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
        let deadline = Instant::now() + within;
        let mut missing = world - rank - 1;
        listener.set_nonblocking(true)?;
        while missing > 0 {
            let (mut stream, _) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let absent: Vec<usize> = (rank + 1..world)
                            .filter(|&p| streams[p].is_none())
                            .collect();
                        bail!(
                            "workers {absent:?} of generation {generation} never joined the mesh"
                        );
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            stream.set_nonblocking(false)?;
            wire::tune(&stream)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut b = [0u8; 16];
            let peer = stream.read_exact(&mut b).ok().and_then(|()| {
                let peer = u64::from_le_bytes(b[8..].try_into().unwrap_or_default()) as usize;
                (b == greeting(generation, peer) && peer > rank && peer < world).then_some(peer)
            });
            stream.set_read_timeout(None)?;
            // A stranger, a task of another generation, or a rank already here: dropped.
            if let Some(peer) = peer
                && streams[peer].is_none()
            {
                streams[peer] = Some(stream);
                missing -= 1;
            }
        }
        listener.set_nonblocking(false)?;
        for (peer, stream) in dialer
            .join()
            .map_err(|_| anyhow::anyhow!("the mesh's dialer panicked"))??
        {
            streams[peer] = Some(stream);
        }
        let mut mesh = Mesh {
            rank,
            world,
            tx: Vec::with_capacity(world),
            rx: Vec::with_capacity(world),
            sent: vec![0; world],
            received: vec![0; world],
        };
        for stream in streams {
            match stream {
                Some(stream) => {
                    let reader = stream.try_clone()?;
                    mesh.tx
                        .push(Some(BufWriter::with_capacity(BUFFER_BYTES, stream)));
                    mesh.rx
                        .push(Some(BufReader::with_capacity(BUFFER_BYTES, reader)));
                }
                None => {
                    mesh.tx.push(None);
                    mesh.rx.push(None);
                }
            }
        }
        Ok(mesh)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    fn writer(
        tx: &mut [Option<BufWriter<TcpStream>>],
        peer: usize,
    ) -> anyhow::Result<&mut BufWriter<TcpStream>> {
        tx.get_mut(peer)
            .and_then(Option::as_mut)
            .ok_or_else(|| anyhow::anyhow!("no connection to worker {peer}"))
    }

    fn reader(
        rx: &mut [Option<BufReader<TcpStream>>],
        peer: usize,
    ) -> anyhow::Result<&mut BufReader<TcpStream>> {
        rx.get_mut(peer)
            .and_then(Option::as_mut)
            .ok_or_else(|| anyhow::anyhow!("no connection from worker {peer}"))
    }

    fn write(w: &mut BufWriter<TcpStream>, count: u64, data: &[f32]) -> std::io::Result<()> {
        wire::write_frame(w, Kind::Chunk, COLLECTIVE, count, &[wire::bytes(data)])?;
        w.flush()
    }

    fn read(
        r: &mut BufReader<TcpStream>,
        peer: usize,
        count: u64,
        into: &mut [f32],
    ) -> anyhow::Result<()> {
        let header = wire::read_header(r).with_context(|| format!("reading from worker {peer}"))?;
        if header.kind != Kind::Chunk || header.flags != COLLECTIVE || header.step != count {
            bail!(
                "collective out of step with worker {peer}: message {} of kind {:?}, expected message {count}",
                header.step,
                header.kind
            );
        }
        wire::read_into(r, header.len, &mut [into])
            .with_context(|| format!("reading {} values from worker {peer}", into.len()))?;
        Ok(())
    }

    /// Sends `data` to `peer`.
    pub fn send(&mut self, peer: usize, data: &[f32]) -> anyhow::Result<()> {
        let count = self.sent[peer];
        Self::write(Self::writer(&mut self.tx, peer)?, count, data)
            .with_context(|| format!("sending to worker {peer}"))?;
        self.sent[peer] += 1;
        Ok(())
    }

    /// Receives `into.len()` values from `peer`.
    pub fn recv(&mut self, peer: usize, into: &mut [f32]) -> anyhow::Result<()> {
        let count = self.received[peer];
        Self::read(Self::reader(&mut self.rx, peer)?, peer, count, into)?;
        self.received[peer] += 1;
        Ok(())
    }

    /// Sends `out` to `to` while receiving `into` from `from` (the same peer or another).
    pub fn exchange(
        &mut self,
        to: usize,
        out: &[f32],
        from: usize,
        into: &mut [f32],
    ) -> anyhow::Result<()> {
        let (sent, received) = (self.sent[to], self.received[from]);
        let writer = Self::writer(&mut self.tx, to)?;
        let reader = Self::reader(&mut self.rx, from)?;
        writer
            .flush()
            .with_context(|| format!("sending to worker {to}"))?;
        let header = wire::Header::new(Kind::Chunk, COLLECTIVE, sent, (out.len() * 4) as u64);
        let mut head = [0u8; wire::HEADER_LEN];
        wire::write_header(&mut &mut head[..], header)?;
        let mut outgoing = Progress::new([&head, wire::bytes(out)]);
        let mut incoming_head = [0u8; wire::HEADER_LEN];
        let expected = into.len() * 4;
        let mut incoming = Incoming {
            head: &mut incoming_head,
            payload: wire::bytes_mut(into),
            at: 0,
        };
        // What the reader's buffer already holds of the message.
        let buffered = reader.buffer();
        let take = buffered.len().min(incoming.len());
        incoming.fill(&buffered[..take]);
        reader.consume(take);
        let checked = |incoming: &Incoming| -> anyhow::Result<()> {
            let header = wire::read_header(&mut &incoming.head[..])
                .with_context(|| format!("reading from worker {from}"))?;
            if header.kind != Kind::Chunk
                || header.flags != COLLECTIVE
                || header.step != received
                || header.len != expected as u64
            {
                bail!(
                    "collective out of step with worker {from}: message {} of kind {:?} and {} bytes, expected message {received} of {expected} bytes",
                    header.step,
                    header.kind,
                    header.len
                );
            }
            Ok(())
        };
        let (ws, rs) = (writer.get_mut(), reader.get_mut());
        ws.set_nonblocking(true)?;
        rs.set_nonblocking(true)?;
        let moved = (|| -> anyhow::Result<()> {
            let mut head_checked = false;
            loop {
                let wrote = outgoing
                    .write_to(ws)
                    .with_context(|| format!("sending to worker {to}"))?;
                let read = incoming
                    .read_from(rs)
                    .with_context(|| format!("reading from worker {from}"))?;
                if !head_checked && incoming.at >= wire::HEADER_LEN {
                    checked(&incoming)?;
                    head_checked = true;
                }
                if outgoing.done() && incoming.done() {
                    return Ok(());
                }
                if !wrote && !read {
                    // Wait for whichever side is unfinished (only those: a finished side's
                    // socket could report a hang-up and wake this loop for nothing).
                    let waited = match (outgoing.done(), incoming.done()) {
                        (false, false) => poll(
                            &mut [
                                PollFd::new(&*ws, PollFlags::OUT),
                                PollFd::new(&*rs, PollFlags::IN),
                            ],
                            None,
                        ),
                        (false, true) => poll(&mut [PollFd::new(&*ws, PollFlags::OUT)], None),
                        (true, _) => poll(&mut [PollFd::new(&*rs, PollFlags::IN)], None),
                    };
                    match waited {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(err) => return Err(std::io::Error::from(err).into()),
                    }
                }
            }
        })();
        let restored = ws.set_nonblocking(false).and(rs.set_nonblocking(false));
        moved?;
        restored?;
        self.sent[to] += 1;
        self.received[from] += 1;
        Ok(())
    }
}

use rustix::event::{PollFd, PollFlags, poll};

/// An outgoing message's parts and how far they have gone.
struct Progress<'a> {
    parts: [&'a [u8]; 2],
    part: usize,
    at: usize,
}

impl<'a> Progress<'a> {
    fn new(parts: [&'a [u8]; 2]) -> Self {
        Progress {
            parts,
            part: 0,
            at: 0,
        }
    }

    fn done(&self) -> bool {
        self.part == self.parts.len()
    }

    /// Writes what the socket takes now; whether anything moved.
    fn write_to(&mut self, w: &mut TcpStream) -> std::io::Result<bool> {
        let mut moved = false;
        while !self.done() {
            let rest = &self.parts[self.part][self.at..];
            if rest.is_empty() {
                (self.part, self.at) = (self.part + 1, 0);
                continue;
            }
            match w.write(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.at += n;
                    moved = true;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(moved)
    }
}

/// An incoming message: its header, then its payload, and how much has arrived.
struct Incoming<'a> {
    head: &'a mut [u8; wire::HEADER_LEN],
    payload: &'a mut [u8],
    at: usize,
}

impl Incoming<'_> {
    fn len(&self) -> usize {
        wire::HEADER_LEN + self.payload.len()
    }

    fn done(&self) -> bool {
        self.at == self.len()
    }

    /// The next unfilled bytes.
    fn rest(&mut self) -> &mut [u8] {
        if self.at < wire::HEADER_LEN {
            &mut self.head[self.at..]
        } else {
            &mut self.payload[self.at - wire::HEADER_LEN..]
        }
    }

    /// Copies bytes that arrived earlier (from a reader's buffer).
    fn fill(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.done() {
            let rest = self.rest();
            let n = rest.len().min(bytes.len());
            rest[..n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            self.at += n;
        }
    }

    /// Reads what the socket has now; whether anything moved.
    fn read_from(&mut self, r: &mut TcpStream) -> std::io::Result<bool> {
        let mut moved = false;
        while !self.done() {
            match r.read(self.rest()) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.at += n;
                    moved = true;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(moved)
    }
}
