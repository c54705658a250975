//! The tokens this server found valid recently, so a busy client's requests do not each look their
//! token up in the database.

use drover_store::AuthRecord;

/// Tokens this server found valid in the last [`TokenCache::TTL`], so a busy client's requests do
/// not each look their token up in the database. A token revoked or a quota changed through this
/// server takes effect at once ([`TokenCache::forget_all`]); through another replica, within the TTL.
/// Unknown tokens are never cached, so a guesser always reaches the database (and the rate limit).
#[derive(Debug, Default)]
pub struct TokenCache {
    entries:
        std::sync::Mutex<std::collections::HashMap<[u8; 32], (std::time::Instant, AuthRecord)>>,
}

impl TokenCache {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(2);
    /// Tokens remembered at most; past that, the expired ones are dropped, then all.
    const CAPACITY: usize = 4096;

    pub(crate) fn get(&self, hash: &[u8; 32]) -> Option<AuthRecord> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(hash)
            .filter(|(at, _)| at.elapsed() < Self::TTL)
            .map(|(_, record)| record.clone())
    }

    pub(crate) fn put(&self, hash: [u8; 32], record: AuthRecord) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= Self::CAPACITY {
            entries.retain(|_, (at, _)| at.elapsed() < Self::TTL);
            if entries.len() >= Self::CAPACITY {
                entries.clear();
            }
        }
        entries.insert(hash, (std::time::Instant::now(), record));
    }

    /// Forgets every token: after a revocation or a change to what a token's record holds.
    pub fn forget_all(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
