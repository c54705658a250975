//! The names the registry builds policies by: every policy's, the ablations of `drover`, and which
//! of them are oracle baselines.

/// Every policy's registered name.
pub fn policy_names() -> Vec<&'static str> {
    vec![
        "fifo",
        "fifo-backfill",
        "srtf",
        "drf",
        "tiresias",
        "optimus",
        "optimus-oracle",
        "gandiva",
        "gavel",
        "drover",
    ]
}

/// Variants of `drover` with one ingredient removed, for measuring what each contributes (not in
/// `policy_names`, so `--compare all` leaves them out; `--compare` accepts them by name).
pub fn ablation_names() -> Vec<&'static str> {
    vec![
        "drover-no-quotas",
        "drover-no-packing",
        "drover-no-elastic",
        "drover-no-search",
        "drover-model-blind",
    ]
}

/// Whether the named policy is an oracle baseline (it needs the true remaining times).
pub fn is_oracle_policy(name: &str) -> bool {
    matches!(name, "srtf" | "optimus-oracle" | "gavel")
}
