//! Test support shared by several crates' tests, compiled only into tests: a stateful fake of the
//! Kubernetes API server over real HTTP ([`fake_kube::FakeKube`]), since no real API server can be
//! installed where the tests run, with a fake kubelet that runs Pods as local processes
//! ([`fake_kubelet`]). Test databases are `drover_store::testing`'s (the store's
//! `testsuite` feature).

#![expect(
    clippy::unwrap_used,
    reason = "test support: a failure should panic the test"
)]

pub mod fake_kube;
pub mod fake_kubelet;
