//! Every all-reduce algorithm against its α-β prediction and the lower bound, on 2, 4 and 8 processes
//! talking TCP over loopback, for messages of 1 KiB to 64 MiB; and the automatic choice against the
//! best fixed algorithm at each size.
//!
//! `cargo bench -p drover-engine --bench collectives` (`-- --worlds 2,4 --max-mib 16` for fewer).
//! The bench starts one process per rank (this binary again); the ranks measure their links with
//! `Communicator::calibrate`, as a job's workers do when they start, and every algorithm is predicted
//! from that one model. The first half of the ranks count as one node and the rest as another, so the
//! hierarchical all-reduce has two levels (on loopback both levels are the same medium). A time is the
//! median over rounds of the slowest rank's time, each round starting from a barrier.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark that cannot set up should stop"
)]

use drover_engine::dist::collective::cost::{self, CostModel, Shape};
use drover_engine::dist::collective::{Algorithm, Communicator, Mesh};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "DROVER_COLLECTIVES_RANK";

fn nodes(world: usize) -> Vec<usize> {
    (0..world)
        .map(|r| usize::from(r >= world.div_ceil(2)))
        .collect()
}

fn sizes(max_mib: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut bytes = 1usize << 10;
    while bytes <= max_mib << 20 {
        sizes.push(bytes);
        bytes *= 4;
    }
    sizes
}

/// One rank: joins the mesh, calibrates, times every algorithm at every size; rank 0 prints a
/// JSON line per measurement.
fn child(rank: usize, world: usize, max_mib: usize) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("port {}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let addresses: Vec<String> = line.split_whitespace().map(String::from).collect();
    let mesh = Mesh::connect(rank, 1, &listener, &addresses, Duration::from_secs(30)).unwrap();
    let mut comm = Communicator::new(mesh, nodes(world)).unwrap();
    let model = comm.calibrate(max_mib << 20).unwrap();
    if rank == 0 {
        println!("model {}", serde_json::to_string(&model).unwrap());
    }
    let shape = comm.shape().clone();
    for bytes in sizes(max_mib) {
        let n = bytes / 4;
        let mut data = vec![1.0f32; n];
        let mut candidates: Vec<Option<Algorithm>> = Algorithm::ALL.map(Some).to_vec();
        candidates.push(None);
        for choice in candidates {
            let algorithm = choice.unwrap_or_else(|| comm.choose(bytes));
            let predicted = cost::predict(&model, algorithm, &shape, bytes as f64);
            // The same number of rounds on every rank: from the shared model.
            let rounds = ((0.3 / predicted.max(1e-6)).ceil() as usize).clamp(3, 30);
            let mut times = vec![0.0f32; rounds * world];
            for round in 0..=rounds {
                data.fill(1.0);
                comm.barrier().unwrap();
                let t = Instant::now();
                comm.allreduce(choice, &mut data).unwrap();
                let elapsed = t.elapsed().as_secs_f64();
                assert_eq!(data[n / 2], world as f32);
                if round > 0 {
                    times[rank * rounds + round - 1] = elapsed as f32;
                }
            }
            comm.all_gather(&mut times).unwrap();
            if rank == 0 {
                let mut slowest: Vec<f64> = (0..rounds)
                    .map(|i| {
                        (0..world)
                            .map(|r| f64::from(times[r * rounds + i]))
                            .fold(0.0, f64::max)
                    })
                    .collect();
                slowest.sort_by(f64::total_cmp);
                let measured = slowest[rounds / 2];
                println!(
                    "{}",
                    serde_json::json!({
                        "bytes": bytes,
                        "algorithm": choice.map_or("auto", Algorithm::name),
                        "used": algorithm.name(),
                        "measured_s": measured,
                        "predicted_s": predicted,
                        "lower_bound_s": cost::lower_bound(&model, &shape, bytes as f64),
                        "rounds": rounds,
                    })
                );
            }
        }
    }
}

fn human(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn ms(s: f64) -> String {
    if s < 0.01 {
        format!("{:.3}", s * 1e3)
    } else {
        format!("{:.1}", s * 1e3)
    }
}

/// Runs `world` ranks and returns rank 0's model line and measurements.
fn run(world: usize, max_mib: usize) -> (CostModel, Vec<serde_json::Value>) {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..world)
        .map(|rank| {
            Command::new(&exe)
                .env(CHILD, format!("{rank},{world},{max_mib}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    let addresses: Vec<String> = readers
        .iter_mut()
        .map(|r| {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let port = line.trim().strip_prefix("port ").unwrap();
            format!("127.0.0.1:{port}")
        })
        .collect();
    for child in &mut children {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", addresses.join(" ")).unwrap();
    }
    let mut model = None;
    let mut rows = Vec::new();
    for line in readers.remove(0).lines() {
        let line = line.unwrap();
        if let Some(json) = line.strip_prefix("model ") {
            model = Some(serde_json::from_str::<CostModel>(json).unwrap());
        } else {
            rows.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        }
    }
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a rank failed");
    }
    (model.unwrap(), rows)
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        let parts: Vec<usize> = spec.split(',').map(|x| x.parse().unwrap()).collect();
        child(parts[0], parts[1], parts[2]);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let worlds: Vec<usize> = flag("--worlds")
        .unwrap_or_else(|| "2,4,8".into())
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    let max_mib: usize = flag("--max-mib").map_or(64, |x| x.parse().unwrap());
    println!(
        "all-reduce on loopback, {} cores; times in ms (median over rounds of the slowest rank), each with measured/predicted",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let (mut within, mut judged, mut auto_ok, mut auto_judged) = (0, 0, 0, 0);
    for world in worlds {
        let (model, rows) = run(world, max_mib);
        let shape = Shape::of(&nodes(world));
        let curve = |points: &[(f64, f64)], scale: f64| {
            points
                .iter()
                .map(|(b, x)| format!("{}: {:.3}", human(*b as usize), x * scale))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let shared = |c: f64| {
            if c >= 1e29 {
                "unshared".to_string()
            } else {
                format!("{c:.2}")
            }
        };
        println!(
            "\n{world} processes (nodes {:?}); model: intra alpha {:.1} us, beta ns/B by size [{}]; inter alpha {:.1} us, beta [{}]; gamma {:.3} ns/B; at full speed at once: latencies {}, transfers [{}]",
            shape.per_node,
            model.intra.alpha_s * 1e6,
            curve(&model.intra.beta_by_size, 1e9),
            model.inter.alpha_s * 1e6,
            curve(&model.inter.beta_by_size, 1e9),
            model.gamma_s_per_byte * 1e9,
            shared(model.latency_concurrency),
            model
                .concurrency_by_size
                .iter()
                .map(|(b, c)| format!("{}: {}", human(*b as usize), shared(*c)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut header = format!("{:>8} {:>10}", "size", "bound");
        for a in Algorithm::ALL {
            header.push_str(&format!(" {:>24}", a.name()));
        }
        header.push_str(&format!(" {:>36}", "auto (choice, vs best fixed)"));
        println!("{header}");
        let mut by_size: Vec<usize> = rows
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap() as usize)
            .collect();
        by_size.dedup();
        for bytes in by_size {
            let of = |name: &str| {
                rows.iter()
                    .find(|r| r["bytes"] == bytes && r["algorithm"] == name)
                    .unwrap()
            };
            let bound = of("ring")["lower_bound_s"].as_f64().unwrap();
            let mut line = format!("{:>8} {:>10}", human(bytes), ms(bound));
            let mut best = f64::INFINITY;
            for a in Algorithm::ALL {
                let row = of(a.name());
                let (m, p) = (
                    row["measured_s"].as_f64().unwrap(),
                    row["predicted_s"].as_f64().unwrap(),
                );
                best = best.min(m);
                let ratio = m / p;
                if bytes >= 1 << 20 {
                    judged += 1;
                    if (1.0 / 1.5..=1.5).contains(&ratio) {
                        within += 1;
                    }
                }
                line.push_str(&format!(" {:>15} ({:>5.2}x)", ms(m), ratio));
            }
            let auto = of("auto");
            let m = auto["measured_s"].as_f64().unwrap();
            auto_judged += 1;
            if m <= 1.1 * best {
                auto_ok += 1;
            }
            line.push_str(&format!(
                " {:>10} ({}, {:.2}x)",
                ms(m),
                auto["used"].as_str().unwrap(),
                m / best
            ));
            println!("{line}");
        }
    }
    println!(
        "\nat >= 1 MiB, {within} of {judged} measurements within 1.5x of their prediction (either way); the automatic choice within 10% of the best fixed algorithm at {auto_ok} of {auto_judged} sizes"
    );
}
