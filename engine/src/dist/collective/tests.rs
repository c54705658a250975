use super::cost::{self, CostModel, Link, Shape};
use super::*;
use std::net::TcpListener;
use std::time::Duration;

/// `n` listeners on loopback and their addresses.
fn listeners(n: usize) -> (Vec<TcpListener>, Vec<String>) {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addresses = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    (listeners, addresses)
}

/// `world` communicators over loopback, one per thread, on the nodes `node_of` names.
fn communicators(node_of: &[usize]) -> Vec<Communicator> {
    let (listeners, addresses) = listeners(node_of.len());
    joined(&listeners, &addresses, node_of)
}

/// The communicators of workers listening on `listeners`, once every one has joined.
fn joined(listeners: &[TcpListener], addresses: &[String], node_of: &[usize]) -> Vec<Communicator> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = listeners
            .iter()
            .enumerate()
            .map(|(rank, listener)| {
                scope.spawn(move || {
                    let mesh = Mesh::connect(rank, 7, listener, addresses, Duration::from_secs(10))
                        .unwrap();
                    Communicator::new(mesh, node_of.to_vec()).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Runs `f` on every rank at once; its results in rank order.
fn on_all<T: Send>(
    comms: &mut [Communicator],
    inputs: Vec<Vec<f32>>,
    f: impl Fn(&mut Communicator, &mut Vec<f32>) -> T + Sync,
) -> Vec<(Vec<f32>, T)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = comms
            .iter_mut()
            .zip(inputs)
            .map(|(comm, mut data)| {
                let f = &f;
                scope.spawn(move || {
                    let out = f(comm, &mut data);
                    (data, out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn inputs(world: usize, n: usize, integral: bool) -> Vec<Vec<f32>> {
    (0..world)
        .map(|r| {
            (0..n)
                .map(|i| {
                    let x = ((i * 7 + r * 13) % 17) as f32 - 8.0;
                    if integral {
                        x
                    } else {
                        x * 0.137 + (r as f32 + 1.0) * 1e-3 / (i as f32 + 1.0)
                    }
                })
                .collect()
        })
        .collect()
}

/// Two nodes: the first half of the ranks on one, the rest on the other.
fn two_nodes(world: usize) -> Vec<usize> {
    (0..world)
        .map(|r| usize::from(r >= world.div_ceil(2)))
        .collect()
}

#[test]
fn every_algorithm_sums_exactly_on_every_group_size() {
    for world in 1..=9usize {
        let mut comms = communicators(&two_nodes(world));
        for n in [0usize, 1, 2, 5, 7, 1000, 100_003] {
            let given = inputs(world, n, true);
            let expected: Vec<f32> = (0..n).map(|i| given.iter().map(|v| v[i]).sum()).collect();
            for algorithm in Algorithm::ALL {
                let outputs = on_all(&mut comms, given.clone(), |c, data| {
                    c.allreduce(Some(algorithm), data).unwrap()
                });
                for (rank, (out, used)) in outputs.into_iter().enumerate() {
                    assert_eq!(used, algorithm);
                    assert_eq!(
                        out,
                        expected,
                        "{} on {world} ranks, n {n}, rank {rank}",
                        algorithm.name()
                    );
                }
            }
        }
    }
}

#[test]
fn every_rank_ends_with_the_same_bits() {
    // Non-integral values: the order of summation shows in the last bits, so a rank that summed
    // in its own order would differ from the others.
    for world in [3usize, 4, 6, 8] {
        let mut comms = communicators(&two_nodes(world));
        let n = 10_007;
        let given = inputs(world, n, false);
        for algorithm in Algorithm::ALL {
            let outputs = on_all(&mut comms, given.clone(), |c, data| {
                c.allreduce(Some(algorithm), data).unwrap()
            });
            let first = outputs[0].0.clone();
            for (i, x) in first.iter().enumerate() {
                let exact: f64 = given.iter().map(|v| f64::from(v[i])).sum();
                assert!(
                    (f64::from(*x) - exact).abs() <= 1e-5 * (1.0 + exact.abs()),
                    "{} at {i}",
                    algorithm.name()
                );
            }
            for (rank, (out, _)) in outputs.iter().enumerate() {
                assert!(
                    out.iter()
                        .zip(&first)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{} on {world} ranks: rank {rank} differs from rank 0",
                    algorithm.name()
                );
            }
        }
    }
}

#[test]
fn reduce_scatter_all_gather_and_broadcast() {
    for world in [1usize, 2, 3, 5, 8] {
        let mut comms = communicators(&vec![0; world]);
        let n = 1001;
        let given = inputs(world, n, true);
        let expected: Vec<f32> = (0..n).map(|i| given.iter().map(|v| v[i]).sum()).collect();
        let scattered = on_all(&mut comms, given.clone(), |c, data| {
            c.reduce_scatter(data).unwrap()
        });
        let mut covered = 0;
        for (rank, (out, mine)) in scattered.iter().enumerate() {
            assert_eq!(out[mine.clone()], expected[mine.clone()], "rank {rank}");
            covered += mine.len();
        }
        assert_eq!(covered, n);
        // Each rank brings only its own block (zeros elsewhere) and ends with every block.
        let blocks: Vec<Vec<f32>> = (0..world)
            .map(|rank| {
                let mine = algorithms::block(n, world, rank);
                (0..n)
                    .map(|i| if mine.contains(&i) { expected[i] } else { 0.0 })
                    .collect()
            })
            .collect();
        for (out, ()) in on_all(&mut comms, blocks, |c, data| c.all_gather(data).unwrap()) {
            assert_eq!(out, expected);
        }
        for root in 0..world {
            let mut given = vec![vec![0.0; 33]; world];
            given[root] = (0..33).map(|i| i as f32 + root as f32).collect();
            let expected = given[root].clone();
            for (out, ()) in on_all(&mut comms, given, |c, data| {
                c.broadcast(root, data).unwrap()
            }) {
                assert_eq!(out, expected, "root {root} of {world}");
            }
        }
    }
}

#[test]
fn the_mesh_drops_strangers_and_other_generations() {
    let (listeners, addresses) = listeners(3);
    // Before the workers join: a stranger's bytes and a worker of generation 6 knock at rank 0.
    let mut stranger = std::net::TcpStream::connect(&addresses[0]).unwrap();
    std::io::Write::write_all(&mut stranger, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut stale = std::net::TcpStream::connect(&addresses[0]).unwrap();
    let mut old = [0u8; 16];
    old[..8].copy_from_slice(&6u64.to_le_bytes());
    old[8..].copy_from_slice(&1u64.to_le_bytes());
    std::io::Write::write_all(&mut stale, &old).unwrap();
    let mut comms = joined(&listeners, &addresses, &[0, 0, 0]);
    let outputs = on_all(&mut comms, inputs(3, 10, true), |c, data| {
        c.allreduce(Some(Algorithm::Ring), data).unwrap()
    });
    let expected: Vec<f32> = (0..10)
        .map(|i| inputs(3, 10, true).iter().map(|v| v[i]).sum())
        .collect();
    assert!(outputs.iter().all(|(out, _)| *out == expected));
}

#[test]
fn a_mesh_without_one_worker_fails_in_time_naming_it() {
    let (listeners, addresses) = listeners(2);
    let error = Mesh::connect(0, 7, &listeners[0], &addresses, Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(error.contains("workers [1]"), "{error}");
}

fn model(alpha_s: f64, beta: f64, gamma: f64) -> CostModel {
    CostModel::uniform(Link::new(alpha_s, beta), gamma)
}

#[test]
fn predictions_are_the_textbook_formulas_where_nothing_is_shared() {
    let (a, b, g) = (20e-6, 1e-9, 2e-10);
    let m = model(a, b, g);
    for p in [2usize, 4, 8, 16] {
        let shape = Shape::flat(p);
        let (pf, lg) = (p as f64, (p as f64).log2());
        for n in [1e3, 1e6, 64e6] {
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.max(1e-12);
            let ring = 2.0 * (pf - 1.0) * (a + n * b / pf) + (pf - 1.0) * n * g / pf;
            let tree = 2.0 * lg * (a + n * b) + lg * n * g;
            let rd = lg * (a + n * b + n * g);
            let rab = 2.0 * lg * a + 2.0 * n * b * (pf - 1.0) / pf + n * g * (pf - 1.0) / pf;
            let bound = lg * a + 2.0 * n * b * (pf - 1.0) / pf + n * g * (pf - 1.0) / pf;
            assert!(close(cost::predict(&m, Algorithm::Ring, &shape, n), ring));
            assert!(close(cost::predict(&m, Algorithm::Tree, &shape, n), tree));
            assert!(close(
                cost::predict(&m, Algorithm::RecursiveDoubling, &shape, n),
                rd
            ));
            assert!(close(
                cost::predict(&m, Algorithm::Rabenseifner, &shape, n),
                rab
            ));
            assert!(close(cost::lower_bound(&m, &shape, n), bound));
            for algorithm in cost::FLAT {
                assert!(cost::predict(&m, algorithm, &shape, n) >= bound * (1.0 - 1e-12));
            }
        }
    }
}

#[test]
fn the_choice_follows_the_message_size() {
    let m = model(20e-6, 1e-9, 2e-10);
    let shape = Shape::flat(8);
    // Latency rules small messages: the fewest steps.
    assert_eq!(
        cost::choose(&m, &shape, 1024.0),
        Algorithm::RecursiveDoubling
    );
    // Bandwidth rules large ones: Rabenseifner's 2·log₂P steps beat the ring's 2(P−1).
    assert_eq!(cost::choose(&m, &shape, 64e6), Algorithm::Rabenseifner);
    // Where summing is free and latency nothing, the ring and Rabenseifner move the same bytes.
    let free = model(0.0, 1e-9, 0.0);
    let ring = cost::predict(&free, Algorithm::Ring, &shape, 64e6);
    let rab = cost::predict(&free, Algorithm::Rabenseifner, &shape, 64e6);
    assert!((ring - rab).abs() < 1e-12, "{ring} {rab}");
    // Two nodes of four whose link between them is slow: the hierarchical all-reduce crosses it
    // least often for small messages.
    let mut two = m;
    two.inter = Link::new(500e-6, 1e-9);
    let shape = Shape::of(&[0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(shape.is_hierarchical());
    assert_eq!(cost::choose(&two, &shape, 4096.0), Algorithm::Hierarchical);
}

#[test]
fn shared_transfers_slow_the_busiest_steps() {
    let mut m = model(10e-6, 1e-9, 0.0);
    let shape = Shape::flat(8);
    let alone = cost::predict(&m, Algorithm::Ring, &shape, 8e6);
    m.concurrency = 2.0;
    // Eight transfers at once on a medium that carries two at full speed: four times the bytes' time.
    let shared = cost::predict(&m, Algorithm::Ring, &shape, 8e6);
    let bytes_time = 14.0 * 1e6 * 1e-9;
    assert!(
        (shared - alone - 3.0 * bytes_time).abs() < 1e-9,
        "{shared} {alone}"
    );
    // And latencies that overlap only two at a time: each of the 14 steps waits four latencies.
    m.latency_concurrency = 2.0;
    let waiting = cost::predict(&m, Algorithm::Ring, &shape, 8e6);
    assert!((waiting - shared - 14.0 * 3.0 * 10e-6).abs() < 1e-9);
    // The tree's last steps move one message at a time: no wait there.
    let tree_alone = cost::predict(&model(10e-6, 1e-9, 0.0), Algorithm::Tree, &shape, 8e6);
    let tree_shared = cost::predict(&m, Algorithm::Tree, &shape, 8e6);
    // Senders per level 4, 2, 1 (each way): shares 2, 1, 1.
    let extra = 2.0 * (10e-6 + 8e6 * 1e-9);
    assert!(
        (tree_shared - tree_alone - extra).abs() < 1e-9,
        "{tree_shared} {tree_alone}"
    );
}

#[test]
fn a_fit_recovers_a_line() {
    let points: Vec<(f64, f64)> = [256.0, 65536.0, 1048576.0, 4194304.0]
        .iter()
        .map(|&x| (x, 15e-6 + x * 0.4e-9))
        .collect();
    let link = Link::fit(&points);
    assert!((link.alpha_s - 15e-6).abs() < 1e-9);
    assert!((link.beta_s_per_byte - 0.4e-9).abs() < 1e-15);
    // Measured: α the smallest message's time, β per size from what is left.
    let link = Link::measured(&points);
    assert_eq!(link.alpha_s, points[0].1);
    assert_eq!(link.beta_by_size.len(), 3);
    assert!((link.beta(1048576.0) - (0.4e-9 + 0.0)).abs() < 1e-11);
    assert!((link.time(4194304.0) - points[3].1).abs() < 1e-12);
}

#[test]
fn calibration_leaves_every_rank_with_rank_zeros_figures() {
    let mut comms = communicators(&[0, 0, 1, 1]);
    let models = on_all(&mut comms, vec![Vec::new(); 4], |c, _| {
        c.calibrate(2 << 20).unwrap()
    });
    let first = models[0].1.clone();
    // Up to 2 MiB: 256 B and 64 KiB, 1 and 4 MiB measured (the first size past the largest too).
    assert_eq!(
        first
            .intra
            .beta_by_size
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>(),
        [65536.0, 1048576.0, 4194304.0]
    );
    assert_eq!(first.concurrency_by_size.len(), 2);
    assert!(first.latency_concurrency >= 1.0);
    assert!(first.intra.beta_s_per_byte > 0.0 && first.inter.beta_s_per_byte > 0.0);
    assert!(first.intra.alpha_s >= 0.0 && first.gamma_s_per_byte > 0.0);
    assert!(first.concurrency >= 1.0);
    for (_, model) in &models {
        assert_eq!(*model, first);
    }
    // Where the curve was measured, β between two sizes lies between theirs.
    let (b1, b4) = (first.intra.beta(1048576.0), first.intra.beta(4194304.0));
    let b2 = first.intra.beta(2097152.0);
    assert!(b1.min(b4) <= b2 && b2 <= b1.max(b4));
    // And they choose alike for every size.
    for bytes in [4usize, 4096, 1 << 20, 64 << 20] {
        let choices: Vec<Algorithm> = comms.iter().map(|c| c.choose(bytes)).collect();
        assert!(choices.iter().all(|&c| c == choices[0]), "{choices:?}");
    }
}

#[test]
fn bytes_sent_per_worker() {
    let shape = Shape::flat(4);
    let n = 4e6;
    let ring = cost::bytes_per_worker(Algorithm::Ring, Algorithm::Ring, &shape, n);
    assert_eq!(ring, 2.0 * 3.0 / 4.0 * n);
    let rd = cost::bytes_per_worker(Algorithm::RecursiveDoubling, Algorithm::Ring, &shape, n);
    assert_eq!(rd, 2.0 * n);
    let one = Shape::flat(1);
    assert_eq!(
        cost::bytes_per_worker(Algorithm::Tree, Algorithm::Ring, &one, n),
        0.0
    );
}
