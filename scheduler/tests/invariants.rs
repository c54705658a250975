//! The invariant checker catches what it must.

mod common;

use common::{FixedOracle, apply, id, job, snapshot};
use drover_scheduler::plan::{JobPlan, Placement, Role, RunReason, TaskPlacement};
use drover_scheduler::{NodeId, Plan, build_policy, invariants};

fn worker(node: u32, gpu: u16, packed: bool) -> TaskPlacement {
    TaskPlacement {
        role: Role::Worker,
        index: 0,
        node: NodeId(node),
        gpus: vec![gpu],
        cpus: 1,
        memory_gb: 0,
        packed,
    }
}

fn ps(node: u32, cpus: u32) -> TaskPlacement {
    TaskPlacement {
        role: Role::Ps,
        index: 0,
        node: NodeId(node),
        gpus: vec![],
        cpus,
        memory_gb: 0,
        packed: false,
    }
}

fn run(tasks: Vec<TaskPlacement>) -> JobPlan {
    JobPlan::Run {
        placement: Placement { tasks },
        reason: RunReason::Started,
    }
}

#[test]
fn violations_are_caught() {
    let snap = snapshot(1, 2, vec![job(0, 1, 0.0), job(1, 1, 0.0)]);
    let plan = |a: JobPlan, b: JobPlan| Plan {
        jobs: [(id(0), a), (id(1), b)].into(),
        ..Plan::default()
    };
    let ok = plan(
        run(vec![worker(0, 0, false), ps(0, 1)]),
        run(vec![worker(0, 1, false), ps(0, 1)]),
    );
    assert_eq!(invariants::check(&snap, &ok), Ok(()));
    let shared = plan(
        run(vec![worker(0, 0, false), ps(0, 1)]),
        run(vec![worker(0, 0, false), ps(0, 1)]),
    );
    assert!(
        invariants::check(&snap, &shared)
            .unwrap_err()
            .0
            .contains("without a packing decision")
    );
    // Packed by decision, and 8 + 8 GB fits a 32 GB GPU.
    let packed = plan(
        run(vec![worker(0, 0, true), ps(0, 1)]),
        run(vec![worker(0, 0, true), ps(0, 1)]),
    );
    assert_eq!(invariants::check(&snap, &packed), Ok(()));
    let cpus = plan(
        run(vec![worker(0, 0, false), ps(0, 63)]),
        run(vec![worker(0, 1, false), ps(0, 1)]),
    );
    assert!(
        invariants::check(&snap, &cpus)
            .unwrap_err()
            .0
            .contains("CPUs committed")
    );
    let half_gang = plan(
        run(vec![worker(0, 0, false)]),
        JobPlan::Wait {
            reason: drover_scheduler::WaitReason::LowerPriority,
        },
    );
    assert!(
        invariants::check(&snap, &half_gang)
            .unwrap_err()
            .0
            .contains("outside its ranges")
    );
    let missing = Plan {
        jobs: [(id(0), run(vec![worker(0, 0, false), ps(0, 1)]))].into(),
        ..Plan::default()
    };
    assert!(invariants::check(&snap, &missing).is_err());
    let bad_gpu = plan(
        run(vec![worker(0, 7, false), ps(0, 1)]),
        JobPlan::Wait {
            reason: drover_scheduler::WaitReason::LowerPriority,
        },
    );
    assert!(invariants::check(&snap, &bad_gpu).is_err());
}

#[test]
fn plan_changes_name_starts_stops_and_moves() {
    let mut snap = snapshot(2, 4, vec![job(0, 2, 0.0), job(1, 2, 1.0)]);
    let plan = build_policy("fifo", None)
        .unwrap()
        .schedule(&snap, &Plan::default());
    let changes = plan.changes(&snap);
    assert_eq!(changes.len(), 2, "{changes:?}");
    apply(&mut snap, &plan);
    assert!(
        plan.changes(&snap).is_empty(),
        "nothing changes once applied"
    );
    let srtf = build_policy("srtf", Some(Box::new(FixedOracle::default())))
        .unwrap()
        .schedule(&snap, &plan);
    assert!(
        srtf.changes(&snap).is_empty(),
        "SRTF keeps jobs that all fit where they are"
    );
}
