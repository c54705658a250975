//! Typed ids. All are UUIDs; jobs use version 7 (time-ordered), so ordering by id is ordering by creation,
//! which is what cursor pagination relies on.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

typed_id!(
    /// A job.
    JobId
);
typed_id!(
    /// A tenant (a team sharing the cluster).
    TenantId
);
typed_id!(
    /// A user, who belongs to one tenant.
    UserId
);
typed_id!(
    /// An API token (the id, never the secret).
    TokenId
);
typed_id!(
    /// A hyper-parameter search.
    ExperimentId
);
