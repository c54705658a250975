//! Which all-reduce: the [`Algorithm`] a job names or the cost model chooses, and the group-size
//! arithmetic the algorithms and their costs share.

/// An all-reduce algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    Ring,
    Tree,
    RecursiveDoubling,
    Rabenseifner,
    Hierarchical,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Ring,
        Algorithm::Tree,
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Hierarchical,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::Rabenseifner => "rabenseifner",
            Algorithm::Hierarchical => "hierarchical",
        }
    }

    /// The job spec's fixed choice (`None` for `auto`).
    pub fn from_spec(collective: drover_core::spec::Collective) -> Option<Algorithm> {
        use drover_core::spec::Collective;
        match collective {
            Collective::Auto => None,
            Collective::Ring => Some(Algorithm::Ring),
            Collective::Tree => Some(Algorithm::Tree),
            Collective::RecursiveDoubling => Some(Algorithm::RecursiveDoubling),
            Collective::Rabenseifner => Some(Algorithm::Rabenseifner),
            Collective::Hierarchical => Some(Algorithm::Hierarchical),
        }
    }
}

/// The largest power of two not above `w` (`w ≥ 1`).
pub fn floor_pow2(w: usize) -> usize {
    1 << (usize::BITS - 1 - w.leading_zeros())
}
