//! Local SGD: averaging every step with plain SGD is the all-reduce of gradients; averaging every
//! ten steps still learns, with a tenth of the bytes.

use super::*;
use drover_core::spec::LocalSgd;

fn allreduce(local_sgd: Option<u32>) -> Distributed {
    Distributed {
        mode: DistributedMode::Allreduce,
        local_sgd: local_sgd.map(|every_steps| LocalSgd { every_steps }),
        ..Distributed::default()
    }
}

#[test]
fn local_sgd_averaging_every_step_equals_summed_gradients() {
    let spec = digits_mlp(serde_json::json!({"type": "sgd", "lr": 0.1}), 20, 20);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, summed) = run_job(&spec, a.path(), 3, 0, &allreduce(None));
    let (_, local) = run_job(&spec, b.path(), 3, 0, &allreduce(Some(1)));
    assert_eq!((summed.step, local.step), (20, 20));
    let a = checkpoint::load(summed.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(local.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_close(&a.params, &b.params, 1e-5);
}

#[test]
fn local_sgd_every_ten_steps_learns_with_a_tenth_of_the_bytes() {
    let spec = digits_mlp(
        serde_json::json!({"type": "sgd", "lr": 0.1, "momentum": 0.9}),
        300,
        300,
    );
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (summed, _) = run_job(&spec, a.path(), 3, 0, &allreduce(None));
    let (local, outcome) = run_job(&spec, b.path(), 3, 0, &allreduce(Some(10)));
    assert_eq!(outcome.step, 300);
    let (accuracy, local_accuracy) = (summed.last("val_accuracy"), local.last("val_accuracy"));
    assert!(
        local_accuracy > 0.9 && local_accuracy > accuracy - 0.03,
        "local SGD {local_accuracy}, summed gradients {accuracy}"
    );
    // Bytes a step, averaged over each 100-step report: the parameters (as many as the gradient)
    // every tenth step, and 12 bytes of wishes on the others.
    let (bytes, local_bytes) = (
        summed.at(200, "grad_bytes_per_step"),
        local.at(200, "grad_bytes_per_step"),
    );
    eprintln!(
        "local SGD every 10 steps: val_accuracy {local_accuracy:.4} against {accuracy:.4} summed; {local_bytes:.0} bytes a step against {bytes:.0}"
    );
    assert!(
        local_bytes < bytes / 8.0 && local_bytes > bytes / 12.0,
        "{local_bytes} against {bytes}"
    );
}
