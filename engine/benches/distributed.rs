//! Communication speed of distributed training on loopback, with a model of ≥ 100 MB:
//!
//! 1. parameter servers: 2 PS shards and 2 workers in BSP, each step a push of the whole gradient and a
//!    pull of the whole model per worker, the shards' SGD-momentum update inside the timed path —
//!    throughput per worker (GB/s) next to raw TCP moving the same bytes over the same number of
//!    concurrent connections (each connection sends its shard's bytes and gets as many back);
//! 2. the latency-bandwidth model `t(n) = α + n·β` fitted to ping-pong times on one connection, and each
//!    measured communication time next to what the model predicts for it;
//! 3. ring all-reduce of the same vector among 2 and 3 workers next to `2(p−1)(α + (n/p)·β)`.
//!
//! `cargo bench -p drover-engine --bench distributed` (`-- --mb N` for another model size). All tasks
//! are threads of this process talking TCP over 127.0.0.1, so they share this machine's cores.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use drover_core::spec::{Compression, LrSchedule, OptimizerSpec, SyncMode};
use drover_engine::dist::collective::{Algorithm, Communicator, Mesh};
use drover_engine::dist::ps::{Shard, ShardConfig};
use drover_engine::dist::wire::{self, Hello};
use drover_engine::dist::{Layout, PsClient};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const WARMUP: u64 = 2;
const STEPS: u64 = 6;
const WORKERS: u32 = 2;
const SHARDS: u32 = 2;

fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// The model: four square matrices and their biases, `mb` megabytes in all.
fn model(mb: usize) -> (Vec<String>, Vec<usize>) {
    let side = (((mb * 1_000_000 / 4) / 4) as f64).sqrt().ceil() as usize;
    let mut names = Vec::new();
    let mut sizes = Vec::new();
    for i in 0..4 {
        names.push(format!("layer{i}.weight"));
        sizes.push(side * side);
        names.push(format!("layer{i}.bias"));
        sizes.push(side);
    }
    (names, sizes)
}

/// Seconds per BSP step (push + pull per worker, shard updates included), fastest of the timed steps.
fn ps_step(names: &[String], sizes: &[usize]) -> f64 {
    let layout = Layout::new(names, sizes, SHARDS);
    let values: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.01; n]).collect();
    let total = WARMUP + STEPS;
    let addresses: Vec<(TcpListener, String)> = (0..SHARDS).map(|_| listener()).collect();
    std::thread::scope(|scope| {
        for (index, (listener, _)) in addresses.iter().enumerate() {
            let shard = Shard::new(
                ShardConfig {
                    job: "bench".into(),
                    generation: 1,
                    index,
                    workers: WORKERS,
                    sync: SyncMode::Bsp,
                    staleness: 0,
                    compression: Compression::None,
                    optimizer: OptimizerSpec::Sgd {
                        lr: 0.01,
                        momentum: 0.9,
                        nesterov: false,
                        weight_decay: 0.0,
                    },
                    lr_schedule: LrSchedule::default(),
                    total_steps: total,
                    schedule_steps: total,
                    start_step: 0,
                },
                layout.clone(),
                names.to_vec(),
                &values,
                None,
            )
            .unwrap();
            scope.spawn(move || shard.serve(listener, None).unwrap());
        }
        let shard_addresses: Vec<String> = addresses.iter().map(|(_, a)| a.clone()).collect();
        let workers: Vec<_> = (0..WORKERS)
            .map(|rank| {
                let layout = layout.clone();
                let shard_addresses = shard_addresses.clone();
                let mut params = values.clone();
                scope.spawn(move || {
                    let hello = Hello {
                        job: "bench".into(),
                        generation: 1,
                        rank,
                        workers: WORKERS,
                        layout: layout.fingerprint(),
                    };
                    let mut client = PsClient::connect(
                        &shard_addresses,
                        &hello,
                        layout,
                        &Compression::None,
                        0.0,
                        Duration::from_secs(10),
                    )
                    .unwrap();
                    let grads: Vec<Vec<f32>> =
                        params.iter().map(|p| vec![0.001; p.len()]).collect();
                    client.pull(0, &mut params).unwrap();
                    let mut times = Vec::new();
                    for step in 0..total {
                        let started = Instant::now();
                        client.push_pull(step, &grads, &mut params, false).unwrap();
                        if step >= WARMUP {
                            times.push(started.elapsed().as_secs_f64());
                        }
                    }
                    (client, times)
                })
            })
            .collect();
        let mut results: Vec<(PsClient, Vec<f64>)> =
            workers.into_iter().map(|h| h.join().unwrap()).collect();
        results[0].0.shutdown(total).unwrap();
        let fastest = results
            .iter()
            .map(|(_, t)| t.iter().copied().fold(f64::MAX, f64::min))
            .fold(0.0, f64::max);
        drop(results);
        fastest
    })
}

/// Raw TCP: `pairs` connections at once, each sending `bytes[i]` and receiving as many back; seconds
/// per exchange, fastest of the timed rounds.
fn raw_tcp(bytes: &[usize], rounds: u64) -> f64 {
    let servers: Vec<(TcpListener, String)> = bytes.iter().map(|_| listener()).collect();
    std::thread::scope(|scope| {
        for ((listener, _), &n) in servers.iter().zip(bytes) {
            scope.spawn(move || {
                let (mut stream, _) = listener.accept().unwrap();
                wire::tune(&stream).unwrap();
                let mut buf = vec![0u8; n];
                for _ in 0..rounds {
                    stream.read_exact(&mut buf).unwrap();
                    stream.write_all(&buf).unwrap();
                }
            });
        }
        let mut streams: Vec<TcpStream> = servers
            .iter()
            .map(|(_, a)| {
                let s = TcpStream::connect(a).unwrap();
                wire::tune(&s).unwrap();
                s
            })
            .collect();
        // Buffers allocated and touched once, outside the timed rounds.
        let mut buffers: Vec<(Vec<u8>, Vec<u8>)> = bytes
            .iter()
            .map(|&n| (vec![1u8; n], vec![0u8; n]))
            .collect();
        let mut best = f64::MAX;
        for round in 0..rounds {
            let started = Instant::now();
            std::thread::scope(|inner| {
                for (stream, (out, back)) in streams.iter_mut().zip(buffers.iter_mut()) {
                    inner.spawn(move || {
                        let mut reader = stream.try_clone().unwrap();
                        std::thread::scope(|s| {
                            s.spawn(|| reader.read_exact(back).unwrap());
                            stream.write_all(out).unwrap();
                        });
                    });
                }
            });
            if round >= WARMUP.min(rounds - 1) {
                best = best.min(started.elapsed().as_secs_f64());
            }
        }
        best
    })
}

/// Half round-trip times of ping-pong on one connection, for each message size.
fn ping_pong(sizes: &[usize]) -> Vec<(usize, f64)> {
    let (listener, address) = listener();
    let max = *sizes.iter().max().unwrap();
    let reps = |n: usize| if n < 1 << 20 { 200 } else { 5 };
    std::thread::scope(|scope| {
        let sizes_server = sizes.to_vec();
        scope.spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            wire::tune(&stream).unwrap();
            let mut buf = vec![0u8; max];
            for n in sizes_server {
                for _ in 0..reps(n) + 1 {
                    stream.read_exact(&mut buf[..n]).unwrap();
                    stream.write_all(&buf[..n]).unwrap();
                }
            }
        });
        let mut stream = TcpStream::connect(address).unwrap();
        wire::tune(&stream).unwrap();
        let mut buf = vec![0u8; max];
        sizes
            .iter()
            .map(|&n| {
                // One untimed exchange, then the fastest of the timed ones.
                let mut best = f64::MAX;
                for i in 0..reps(n) + 1 {
                    let started = Instant::now();
                    stream.write_all(&buf[..n]).unwrap();
                    let (head, _) = buf.split_at_mut(n);
                    stream.read_exact(head).unwrap();
                    if i > 0 {
                        best = best.min(started.elapsed().as_secs_f64() / 2.0);
                    }
                }
                (n, best)
            })
            .collect()
    })
}

/// `t = α + n·β` in Hockney's way: α is the smallest message's one-way time, β the least-squares slope
/// over the messages of 1 MB and more (the sizes a training step moves).
fn fit(points: &[(usize, f64)]) -> (f64, f64) {
    let alpha = points.iter().min_by_key(|p| p.0).map_or(0.0, |p| p.1);
    let large: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0 >= 1 << 20)
        .map(|&(n, t)| (n as f64, t))
        .collect();
    let k = large.len() as f64;
    let (mx, my) = (
        large.iter().map(|p| p.0).sum::<f64>() / k,
        large.iter().map(|p| p.1).sum::<f64>() / k,
    );
    let sxy: f64 = large.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = large.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    (alpha, sxy / sxx)
}

/// Seconds per ring all-reduce of `n` values among `world` workers, fastest of the timed rounds.
fn ring(world: usize, n: usize) -> f64 {
    let listeners: Vec<(TcpListener, String)> = (0..world).map(|_| listener()).collect();
    let addresses: Vec<String> = listeners.iter().map(|(_, a)| a.clone()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = listeners
            .iter()
            .enumerate()
            .map(|(rank, (listener, _))| {
                let addresses = &addresses;
                scope.spawn(move || {
                    let mesh = Mesh::connect(rank, 1, listener, addresses, Duration::from_secs(10))
                        .unwrap();
                    let mut ring = Communicator::new(mesh, vec![0; world]).unwrap();
                    let mut data = vec![1.0f32; n];
                    let mut best = f64::MAX;
                    for i in 0..WARMUP + STEPS {
                        let started = Instant::now();
                        ring.allreduce(Some(Algorithm::Ring), &mut data).unwrap();
                        if i >= WARMUP {
                            best = best.min(started.elapsed().as_secs_f64());
                        }
                    }
                    best
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(0.0, f64::max)
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mb = args
        .iter()
        .position(|a| a == "--mb")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(104usize);
    let (names, sizes) = model(mb);
    let values: usize = sizes.iter().sum();
    let model_bytes = 4 * values;
    println!(
        "model: {} tensors, {values} values = {:.1} MB; {WORKERS} workers, {SHARDS} PS shards, BSP, SGD momentum on the shards; loopback, {} cores",
        names.len(),
        model_bytes as f64 / 1e6,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let layout = Layout::new(&names, &sizes, SHARDS);
    let shard_bytes: Vec<usize> = (0..SHARDS as usize)
        .map(|k| 4 * layout.shard_len(k))
        .collect();
    let step = ps_step(&names, &sizes);
    let per_worker = 2.0 * model_bytes as f64 / step;
    // The same traffic over raw TCP: every worker-shard connection at once.
    let pairs: Vec<usize> = (0..WORKERS).flat_map(|_| shard_bytes.clone()).collect();
    let raw = raw_tcp(&pairs, WARMUP + STEPS);
    let raw_per_worker = 2.0 * model_bytes as f64 / raw;
    println!(
        "PS push+pull per worker: {:.2} GB/s ({:.1} ms a step, shard updates included)",
        per_worker / 1e9,
        step * 1e3
    );
    println!(
        "raw TCP, same bytes, {} connections at once: {:.2} GB/s per worker ({:.1} ms)",
        pairs.len(),
        raw_per_worker / 1e9,
        raw * 1e3
    );
    println!(
        "PS / raw TCP: {:.0}% (target >= 50%)",
        100.0 * per_worker / raw_per_worker
    );

    let points = ping_pong(&[8, 1 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20, 64 << 20]);
    let (alpha, beta) = fit(&points);
    println!(
        "ping-pong (one connection, half round trips) fit: alpha = {:.1} us, beta = {:.3} ns/byte ({:.2} GB/s)",
        alpha * 1e6,
        beta * 1e9,
        1.0 / beta / 1e9
    );
    for (n, t) in &points {
        println!(
            "  {n:>9} bytes: {:>9.1} us measured, {:>9.1} us model",
            t * 1e6,
            (alpha + *n as f64 * beta) * 1e6
        );
    }
    // One worker's step: a push of its shard's bytes and a pull of as many on each connection.
    let largest = *shard_bytes.iter().max().unwrap() as f64;
    let model_step = 2.0 * (alpha + largest * beta);
    // Every connection's bytes through one loopback whose copies share this machine's cores.
    let all_bytes: f64 = 2.0 * pairs.iter().sum::<usize>() as f64;
    let serial_step = 2.0 * alpha + all_bytes * beta;
    println!(
        "PS step communication: {:.1} ms measured; model {:.1} ms for one worker's connections alone (2(alpha + (n/shards) beta)) = {:.2}x, {:.1} ms with all {} connections' bytes in series (2 alpha + total bytes x beta) = {:.2}x",
        step * 1e3,
        model_step * 1e3,
        step / model_step,
        serial_step * 1e3,
        pairs.len(),
        step / serial_step
    );
    for world in [2usize, 3] {
        let measured = ring(world, values);
        let p = world as f64;
        let formula = 2.0 * (p - 1.0) * (alpha + model_bytes as f64 / p * beta);
        println!(
            "ring all-reduce, {world} workers, {:.1} MB: {:.1} ms measured, {:.1} ms = 2(p-1)(alpha + (n/p) beta) = {:.2}x",
            model_bytes as f64 / 1e6,
            measured * 1e3,
            formula * 1e3,
            measured / formula
        );
    }
}
