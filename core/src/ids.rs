//! Typed ids. All are UUIDs; jobs use version 7 (time-ordered), so ordering by id is ordering by creation,
//! which is what cursor pagination relies on.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        // The UUID's order (its bytes, first to last) compared as one big-endian integer: the
        // scheduler's maps are keyed by ids, and a byte-wise comparison was most of their lookups.
        impl Ord for $name {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.as_u128().cmp(&other.0.as_u128())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

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

#[cfg(test)]
mod tests {
    use super::JobId;
    use uuid::Uuid;

    #[test]
    fn ids_order_as_their_uuids_bytes_do() {
        // Pairs that differ in every byte position, in either direction, and equal ones.
        let mut ids = vec![Uuid::nil(), Uuid::max()];
        for position in 0..16 {
            for value in [0x00u8, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
                let mut bytes = [0x55u8; 16];
                bytes[position] = value;
                ids.push(Uuid::from_bytes(bytes));
            }
        }
        ids.extend((0..64).map(|_| Uuid::now_v7()));
        ids.extend((0..64).map(|_| Uuid::new_v4()));
        for a in &ids {
            for b in &ids {
                assert_eq!(
                    JobId(*a).cmp(&JobId(*b)),
                    a.as_bytes().cmp(b.as_bytes()),
                    "{a} vs {b}"
                );
            }
        }
    }
}
