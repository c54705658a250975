//! Long-lived responses (followed logs) a user may hold open at once. Each polls the database while
//! it is open, so without a ceiling one user (who can mint any number of tokens) could take the
//! connection pool from every tenant; and each ends after [`Streams::LIFETIME`], so a client
//! reconnects, and is authenticated again (a revoked or expired token stops there).

use drover_core::UserId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<HashMap<UserId, usize>>,
}

impl Streams {
    /// Streams one user may hold open at once.
    pub const PER_USER: usize = 16;
    /// How long a stream lasts before the client must reconnect (and authenticate again).
    pub const LIFETIME: Duration = Duration::from_secs(600);

    /// A slot for one more of `user`'s streams, released when dropped; `None` at the ceiling.
    pub fn open(self: &Arc<Self>, user: UserId) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(user).or_insert(0);
        if *count >= Self::PER_USER {
            return None;
        }
        *count += 1;
        Some(StreamSlot {
            streams: self.clone(),
            user,
        })
    }
}

/// One open stream's place in its user's count.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    user: UserId,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.user) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_holds_at_most_so_many_streams_and_closing_one_frees_it() {
        let streams = Arc::new(Streams::default());
        let (ada, bob) = (UserId(uuid::Uuid::new_v4()), UserId(uuid::Uuid::new_v4()));
        let mut held: Vec<StreamSlot> = (0..Streams::PER_USER)
            .map(|_| streams.open(ada).unwrap())
            .collect();
        assert!(streams.open(ada).is_none());
        assert!(streams.open(bob).is_some());
        held.pop();
        assert!(streams.open(ada).is_some());
        drop(held);
        assert!(streams.open.lock().unwrap().get(&ada).is_none());
    }
}
