use super::*;
use crate::models::referee::assert_matches_autograd;
use candle_core::Device;

/// The hand-written step against candle's autograd on the same batch: loss, correct predictions
/// and every gradient.
fn manual_and_autograd_agree(input_shape: &[usize], channels: &[u32], dropout: f64) {
    let device = Device::Cpu;
    let mut params = Params::new(&device);
    let mut cnn = Cnn::new(
        &mut params,
        &mut Rng::seed(5),
        input_shape,
        channels,
        &[12],
        5,
        dropout,
    )
    .expect("model");
    let features: usize = input_shape.iter().product();
    let batch = 3;
    let x: Vec<f32> = (0..batch * features)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 11.0)
        .collect();
    let mut shape = vec![batch];
    shape.extend_from_slice(input_shape);
    let input = Tensor::from_slice(&x, shape, &device).expect("input");
    assert_matches_autograd(&mut cnn, &params, &x, &input, &[0, 4, 2]);
}

#[test]
fn the_hand_written_lenet_step_matches_autograd() {
    manual_and_autograd_agree(&[784], &[6, 16], 0.0);
}

#[test]
fn with_dropout_the_hand_written_step_draws_the_same_masks_as_autograd() {
    manual_and_autograd_agree(&[784], &[6, 16], 0.3);
}

#[test]
fn small_odd_and_many_channel_images_match_autograd_too() {
    // The digits' 8×8 (whose second layer candle's own conv2d gets wrong), odd sizes whose
    // pooling drops a row and a column, three input channels.
    manual_and_autograd_agree(&[64], &[4, 8], 0.0);
    manual_and_autograd_agree(&[1, 9, 9], &[4, 5], 0.2);
    manual_and_autograd_agree(&[3, 12, 12], &[4], 0.0);
}

#[test]
fn each_im2col_route_gives_the_hand_written_step_gradients() {
    // The first layer gathers (its input is the data, which needs no gradient); the next select,
    // unless their selection matrix would pass `MAX_SELECTION` (64×64 images: the second layer's
    // would have 1,024 × 25 × 784 entries), where they gather too.
    let selects = |input_shape: &[usize], channels: &[u32]| {
        let mut params = Params::new(&Device::Cpu);
        let cnn = Cnn::new(
            &mut params,
            &mut Rng::seed(1),
            input_shape,
            channels,
            &[4],
            3,
            0.0,
        )
        .expect("model");
        cnn.convs
            .iter()
            .map(|c| matches!(c.im2col, Im2col::Select(_)))
            .collect::<Vec<_>>()
    };
    assert_eq!(selects(&[784], &[6, 16]), [false, true]);
    assert_eq!(selects(&[64], &[4, 8]), [false, true]);
    assert_eq!(selects(&[1, 64, 64], &[2, 3]), [false, false]);
    assert_eq!(selects(&[1, 9, 9], &[4, 5]), [false, true]);
    // A second layer that gathers, and one that selects (padded 3×3 kernels on 4×4 images); the
    // LeNet and digits shapes above select too.
    manual_and_autograd_agree(&[1, 64, 64], &[2, 3], 0.0);
    manual_and_autograd_agree(&[1, 9, 9], &[4, 5], 0.0);
}

/// The hand-written step against finite differences of its own loss, and its loss against
/// evaluation's: a referee independent of candle.
#[test]
fn gradients_match_finite_differences() {
    for (shape, channels) in [
        (vec![64], vec![4, 8]),
        (vec![1, 9, 9], vec![4, 5]),
        (vec![3, 12, 12], vec![4]),
    ] {
        let mut params = Params::new(&Device::Cpu);
        let mut cnn = Cnn::new(
            &mut params,
            &mut Rng::seed(9),
            &shape,
            &channels,
            &[10],
            3,
            0.0,
        )
        .expect("model");
        let features: usize = shape.iter().product();
        // Values without ties, so that no ReLU or pooling window sits on a kink.
        let mut draw = Rng::seed(3);
        let x: Vec<f32> = (0..2 * features).map(|_| draw.normal()).collect();
        let targets = [2u32, 0];
        let mut grads = Vec::new();
        let mut loss_at = |params: &Params, grads: &mut Vec<Vec<f32>>| {
            cnn.gradients(params, &x, &targets, &mut Rng::seed(0), grads)
                .expect("manual")
                .expect("step")
                .loss
        };
        let loss = loss_at(&params, &mut grads);
        let analytic = grads.clone();
        let mut scratch = Vec::new();
        for (t, name) in params.names.clone().iter().enumerate() {
            let n = params.values[t].len();
            for e in (0..n).step_by((n / 7).max(1)) {
                let a = f64::from(analytic[t][e]);
                let original = params.values[t][e];
                // Central differences at two scales: a ReLU or a pooling window may switch
                // within one of them (a kink), hardly within both.
                let numeric = [1e-3f32, 1e-4].map(|h| {
                    params.values[t][e] = original + h;
                    let up = loss_at(&params, &mut scratch);
                    params.values[t][e] = original - h;
                    let down = loss_at(&params, &mut scratch);
                    params.values[t][e] = original;
                    (up - down) / (2.0 * f64::from(h))
                });
                assert!(
                    numeric
                        .iter()
                        .any(|n| (n - a).abs() <= 2e-3 + 5e-2 * a.abs()),
                    "{shape:?} {name}[{e}]: finite differences {numeric:?}, backward {a}"
                );
            }
        }
        // Evaluation computes the same loss as the training step.
        let mut images = vec![2];
        images.extend_from_slice(&shape);
        let input = Tensor::from_vec(x.clone(), images, &Device::Cpu).expect("input");
        let logits = cnn.evaluate(&input).expect("evaluate");
        let y = Tensor::from_vec(targets.to_vec(), 2, &Device::Cpu).expect("targets");
        let evaluated = candle_nn::loss::cross_entropy(&logits, &y)
            .and_then(|l| l.to_scalar::<f32>())
            .expect("loss");
        assert!(
            (f64::from(evaluated) - loss).abs() < 1e-5,
            "{shape:?}: {evaluated} vs {loss}"
        );
    }
}

#[test]
fn pooling_sends_the_gradient_to_the_maximum_whole() {
    let x = Var::from_tensor(
        &Tensor::from_vec(vec![1.0f32, 4.0, 2.0, 3.0], (1, 1, 2, 2), &Device::Cpu).expect("x"),
    )
    .expect("var");
    let y = pool2(x.as_tensor()).expect("pool");
    let grads = y.sum_all().expect("sum").backward().expect("backward");
    let grad = grads.get(x.as_tensor()).expect("grad");
    assert_eq!(
        grad.flatten_all()
            .expect("flat")
            .to_vec1::<f32>()
            .expect("values"),
        [0.0, 1.0, 0.0, 0.0]
    );
}

/// The GPU path's gradients (the convolutions' gather and selection on CUDA, `pool2`, autograd) against the host's
/// hand-written step on the same batch and weights; skipped where no GPU can be opened.
#[cfg(feature = "cuda")]
#[test]
fn on_a_gpu_autograd_gives_the_host_step_gradients() {
    let Ok(gpu) = crate::device::open("cuda") else {
        eprintln!("skipped: no GPU");
        return;
    };
    let build = |device: &Device| {
        let mut params = Params::new(device);
        let cnn = Cnn::new(
            &mut params,
            &mut Rng::seed(5),
            &[784],
            &[6, 16],
            &[12],
            5,
            0.0,
        )
        .expect("model");
        (params, cnn)
    };
    let (host_params, mut host) = build(&Device::Cpu);
    let (gpu_params, on_gpu) = build(&gpu);
    let mut draw = Rng::seed(3);
    let x: Vec<f32> = (0..4 * 784).map(|_| draw.normal()).collect();
    let targets = vec![0u32, 4, 2, 1];
    let mut grads = Vec::new();
    let step = host
        .gradients(&host_params, &x, &targets, &mut Rng::seed(0), &mut grads)
        .expect("manual")
        .expect("step");
    let input = Tensor::from_vec(x, (4, 784), &gpu).expect("input");
    let logits = on_gpu
        .forward(&input, true, &mut Rng::seed(0))
        .expect("forward");
    let y = Tensor::from_vec(targets, 4, &gpu).expect("targets");
    let loss = candle_nn::loss::cross_entropy(&logits, &y).expect("loss");
    let auto = gpu_params
        .gradients(&loss.backward().expect("backward"))
        .expect("grads");
    let gpu_loss = f64::from(loss.to_scalar::<f32>().expect("scalar"));
    let mut report = vec![format!("loss: host {} GPU {gpu_loss}", step.loss)];
    let mut bad = (step.loss - gpu_loss).abs() > 1e-4;
    for (name, (m, a)) in host_params.names.iter().zip(grads.iter().zip(&auto)) {
        let worst = m
            .iter()
            .zip(a)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        let scale = m.iter().map(|x| x.abs()).fold(0.0f32, f32::max);
        report.push(format!("{name}: worst {worst} of {scale}"));
        bad |= worst > 1e-4 + 1e-3 * scale;
    }
    assert!(!bad, "{report:#?}");
}
