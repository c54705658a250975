use super::*;
use candle_core::{Device, Tensor};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
        .collect()
}

fn close(gpu: &Tensor, host: &Tensor, what: &str) {
    let (a, b) = (
        gpu.to_vec1::<f32>().unwrap(),
        host.to_vec1::<f32>().unwrap(),
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= 1e-6,
        "{what}: the kernel and the host differ by {worst}"
    );
}

#[test]
fn the_kernels_compute_what_the_host_ops_compute() {
    let Ok(gpu) = crate::device::open("cuda") else {
        eprintln!("skipped: no GPU");
        return;
    };
    let n = 70_001;
    let on = |device: &Device, v: Vec<f32>| Tensor::from_vec(v, n, device).unwrap();
    let on2 = |device: &Device, v: Vec<f32>| Tensor::from_vec(v, 2 * n, device).unwrap();
    let moments = AdamMoments {
        beta1: 0.9,
        beta2: 0.999,
    };
    let apply = AdamApply {
        decay: 0.999,
        step_size: 0.01,
        sqrt_c2: 0.3,
        eps: 1e-8,
    };
    let (p, g, mv) = (
        values(n, 1),
        values(n, 2),
        values(2 * n, 3).iter().map(|x| x.abs()).collect::<Vec<_>>(),
    );
    let (hp, hmv) = (on(&Device::Cpu, p.clone()), on2(&Device::Cpu, mv.clone()));
    let hg = on(&Device::Cpu, g.clone());
    hmv.inplace_op2(&hg, &moments).unwrap();
    hp.inplace_op2(&hmv, &apply).unwrap();
    let (dp, dmv, dg) = (on(&gpu, p.clone()), on2(&gpu, mv), on(&gpu, g.clone()));
    dp.inplace_op3(&dg, &dmv, &AdamStep { moments, apply })
        .unwrap();
    close(&dp, &hp, "AdamW parameter");
    close(&dmv, &hmv, "AdamW moments");
    for mode in [SgdMode::Plain, SgdMode::Momentum, SgdMode::Nesterov] {
        for first in [true, false] {
            let momentum = SgdMomentum {
                first,
                momentum: 0.9,
                weight_decay: 1e-3,
            };
            let update = SgdApply {
                mode,
                lr: 0.05,
                momentum: 0.9,
                weight_decay: 1e-3,
            };
            let buf = values(n, 4);
            let (hp, hb) = (on(&Device::Cpu, p.clone()), on(&Device::Cpu, buf.clone()));
            let (dp, db) = (on(&gpu, p.clone()), on(&gpu, buf));
            if mode == SgdMode::Plain {
                hp.inplace_op3(&hg, &hg, &update).unwrap();
                dp.inplace_op3(
                    &dg,
                    &dg,
                    &SgdStep {
                        momentum,
                        apply: update,
                    },
                )
                .unwrap();
            } else {
                hb.inplace_op3(&hg, &hp, &momentum).unwrap();
                hp.inplace_op3(&hg, &hb, &update).unwrap();
                dp.inplace_op3(
                    &dg,
                    &db,
                    &SgdStep {
                        momentum,
                        apply: update,
                    },
                )
                .unwrap();
                close(&db, &hb, &format!("SGD {mode:?} buffer (first {first})"));
            }
            close(&dp, &hp, &format!("SGD {mode:?} parameter (first {first})"));
        }
    }
    // Correct predictions: 1,000 rows of 7 classes, ties included.
    let rows = 1_000;
    let logits: Vec<f32> = values(rows * 7, 5)
        .iter()
        .map(|x| (x * 4.0).round())
        .collect();
    let targets: Vec<u32> = (0..rows as u32).map(|r| r % 7).collect();
    let count = |device: &Device| {
        let total = Tensor::zeros(1, candle_core::DType::F32, device).unwrap();
        let z = Tensor::from_slice(&logits, (rows, 7), device).unwrap();
        let y = Tensor::from_slice(&targets, rows, device).unwrap();
        total.inplace_op3(&z, &y, &AddCorrect).unwrap();
        total.to_vec1::<f32>().unwrap()[0]
    };
    assert_eq!(count(&gpu), count(&Device::Cpu));
}
