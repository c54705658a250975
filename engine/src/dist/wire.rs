//! The wire between a job's tasks: length-prefixed frames over TCP. A frame is a 24-byte header (kind,
//! flags, step, payload length, all little-endian) and a payload of contiguous raw bytes — tensors move
//! as their `f32` bytes, never element by element, read straight into their destination buffers —
//! and the connections they travel on, tuned for bulk traffic and retried while a peer starts.

use std::io::{self, Read, Write};
use std::net::TcpStream;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Worker → PS, first frame: JSON [`Hello`].
    Hello = 1,
    /// PS → worker: accepted (empty) or refused (payload: the reason).
    Welcome = 2,
    Refused = 3,
    /// Worker → PS: the worker's gradient for this shard at `step` (flags: the encoding).
    Push = 4,
    /// Worker → PS: send me the parameters for `step`.
    Pull = 5,
    /// PS → worker: the shard's parameters as of `step` (flags: [`FLUSH_NEXT`] when the worker's
    /// next push is to go out uncompressed with its error-feedback residual, before a checkpoint).
    Params = 6,
    /// Worker 0 → PS: send your part of a checkpoint (no payload).
    Checkpoint = 7,
    /// PS → worker 0: done (empty; after `Checkpoint`, the shard's model and optimizer files: the
    /// model file's length as u64 little endian, then both files) or failed (the reason, flags 1).
    Ack = 8,
    /// Worker 0 → PS: the job is over (or stops); answer every worker with `Stop`.
    Shutdown = 9,
    /// PS → worker: stop after this step (no parameters follow).
    Stop = 10,
    /// Ring neighbours: a chunk of the vector being reduced.
    Chunk = 11,
    /// Worker 0 → PS (no payload, no answer): a checkpoint is coming; flag every worker's
    /// parameters for `step` (or, for a worker already past it, its next ones) with [`FLUSH_NEXT`].
    Flush = 12,
}

/// A `Params` frame's flag: push the next gradient uncompressed, with the residual folded in.
pub const FLUSH_NEXT: u32 = 1;

impl Kind {
    fn from_u32(v: u32) -> io::Result<Kind> {
        Ok(match v {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Refused,
            4 => Kind::Push,
            5 => Kind::Pull,
            6 => Kind::Params,
            7 => Kind::Checkpoint,
            8 => Kind::Ack,
            9 => Kind::Shutdown,
            10 => Kind::Stop,
            11 => Kind::Chunk,
            12 => Kind::Flush,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown frame kind {other}"),
                ));
            }
        })
    }
}

pub const HEADER_LEN: usize = 24;
/// Payloads beyond this are refused (a corrupt or hostile length).
pub const MAX_PAYLOAD: u64 = 16 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u32,
    pub step: u64,
    pub len: u64,
}

impl Header {
    pub fn new(kind: Kind, flags: u32, step: u64, len: u64) -> Self {
        Self {
            kind,
            flags,
            step,
            len,
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.step.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

pub fn read_header(r: &mut impl Read) -> io::Result<Header> {
    let mut b = [0u8; HEADER_LEN];
    r.read_exact(&mut b)?;
    let header = Header {
        kind: Kind::from_u32(u32_at(&b, 0))?,
        flags: u32_at(&b, 4),
        step: u64_at(&b, 8),
        len: u64_at(&b, 16),
    };
    if header.len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {} bytes is too large", header.len),
        ));
    }
    Ok(header)
}

pub fn write_header(w: &mut impl Write, header: Header) -> io::Result<()> {
    w.write_all(&header.encode())
}

/// A frame whose payload is several byte slices written back to back (no concatenation copy).
pub fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    flags: u32,
    step: u64,
    parts: &[&[u8]],
) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    write_header(w, Header::new(kind, flags, step, len as u64))?;
    for part in parts {
        w.write_all(part)?;
    }
    Ok(())
}

/// The `f32`s as bytes (the wire is little-endian, as are the hosts Drover runs on).
pub fn bytes(values: &[f32]) -> &[u8] {
    bytemuck::cast_slice(values)
}

pub fn bytes_mut(values: &mut [f32]) -> &mut [u8] {
    bytemuck::cast_slice_mut(values)
}

/// Reads a payload of `len` bytes into a fresh buffer (control frames: JSON, reasons).
pub fn read_payload(r: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads exactly `targets` (in order) from a payload of `len` bytes; the lengths must match.
pub fn read_into(r: &mut impl Read, len: u64, targets: &mut [&mut [f32]]) -> io::Result<()> {
    let want: usize = targets.iter().map(|t| t.len() * 4).sum();
    if want as u64 != len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("payload of {len} bytes where {want} were expected"),
        ));
    }
    for target in targets.iter_mut() {
        r.read_exact(bytes_mut(target))?;
    }
    Ok(())
}

/// Discards a payload.
pub fn skip(r: &mut impl Read, len: u64) -> io::Result<()> {
    io::copy(&mut r.take(len), &mut io::sink()).map(|_| ())
}

pub fn protocol_error(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Socket settings for bulk tensor traffic: no Nagle delay, large kernel buffers.
pub fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(stream);
    let _ = socket.set_send_buffer_size(8 << 20);
    let _ = socket.set_recv_buffer_size(8 << 20);
    Ok(())
}

/// Connects to `address`, retrying while the peer is not listening yet (tasks start in any order).
pub fn connect(address: &str, within: std::time::Duration) -> io::Result<TcpStream> {
    let deadline = std::time::Instant::now() + within;
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => {
                tune(&stream)?;
                return Ok(stream);
            }
            Err(err) if std::time::Instant::now() >= deadline => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("cannot reach {address}: {err}"),
                ));
            }
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
        }
    }
}

/// The first frame a worker sends a PS shard.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    pub job: String,
    pub generation: u64,
    pub rank: u32,
    pub workers: u32,
    /// The model layout's fingerprint.
    pub layout: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_lengths_are_checked() {
        let mut buf = Vec::new();
        let a = [1.0f32, 2.0];
        let b = [3.0f32];
        write_frame(&mut buf, Kind::Push, 3, 7, &[bytes(&a), bytes(&b)]).unwrap();
        let mut r = buf.as_slice();
        let h = read_header(&mut r).unwrap();
        assert_eq!(h, Header::new(Kind::Push, 3, 7, 12));
        let (mut x, mut y) = (vec![0.0f32; 1], vec![0.0f32; 2]);
        read_into(&mut r, h.len, &mut [&mut x, &mut y]).unwrap();
        assert_eq!((x, y), (vec![1.0], vec![2.0, 3.0]));
        let mut r = buf.as_slice();
        let h = read_header(&mut r).unwrap();
        assert!(read_into(&mut r, h.len, &mut [&mut [0.0f32; 2]]).is_err());
        let mut bad = buf.clone();
        bad[0] = 99;
        assert!(read_header(&mut bad.as_slice()).is_err());
    }
}
