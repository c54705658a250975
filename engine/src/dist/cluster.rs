//! A task's place in a distributed job (its role, its peers' addresses and its own), as the
//! executor's environment (`DROVER_*`) gives it.

/// A task's place in a distributed job, from the executor's environment (`DROVER_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub job: String,
    pub generation: u64,
    pub role: Role,
    /// Every task's address, workers by rank first, then PS shards by index.
    pub peers: Vec<String>,
    /// The address this task listens on (PS shards and all-reduce workers).
    pub listen: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Worker,
    Ps { index: u32 },
}
