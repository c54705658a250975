//! How many tasks of each kind: a job's shape (parameter-server shards and workers), and the
//! inclusive ranges of task counts a job may run at.

use serde::{Deserialize, Serialize};

/// A job's shape: parameter-server shards and workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Shape {
    pub ps: u32,
    pub workers: u32,
}

/// An inclusive range of task counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub min: u32,
    pub max: u32,
}

impl Range {
    pub fn contains(self, n: u32) -> bool {
        self.min <= n && n <= self.max
    }
}
