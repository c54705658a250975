//! Long-lived responses (followed logs, live dashboard pages) open at once. Each polls the database
//! while it is open, so they are capped per user, per tenant (users are free to create: 33 users of
//! one tenant took every stream of the server) and per server; and each ends after
//! [`Streams::LIFETIME`], so a client reconnects, and is authenticated again (a revoked or expired
//! token stops there).

use drover_core::{TenantId, UserId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Streams {
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    users: HashMap<UserId, usize>,
    tenants: HashMap<TenantId, usize>,
    total: usize,
}

/// Which ceiling refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The user holds [`Streams::PER_USER`].
    User,
    /// The user's tenant holds [`Streams::PER_TENANT`].
    Tenant,
    /// The server holds [`Streams::PER_SERVER`].
    Server,
}

impl Refusal {
    /// Says which ceiling was reached, for an answer.
    pub fn message(self) -> String {
        match self {
            Refusal::User => format!(
                "at most {} followed logs and live pages open at once per user: close one first",
                Streams::PER_USER
            ),
            Refusal::Tenant => format!(
                "at most {} followed logs and live pages open at once per tenant: close one first",
                Streams::PER_TENANT
            ),
            Refusal::Server => format!(
                "this server has {} followed logs and live pages open, its most; retry later",
                Streams::PER_SERVER
            ),
        }
    }
}

impl Streams {
    /// Streams one user may hold open at once.
    pub const PER_USER: usize = 16;
    /// Streams one tenant's users may hold open at once, together.
    pub const PER_TENANT: usize = 64;
    /// Streams the server holds open at once, for every tenant.
    pub const PER_SERVER: usize = 512;
    /// How long a stream lasts before the client must reconnect (and authenticate again).
    pub const LIFETIME: Duration = Duration::from_secs(600);

    /// A slot for one more of `user`'s streams (of `tenant`), released when dropped.
    pub fn open(self: &Arc<Self>, user: UserId, tenant: TenantId) -> Result<StreamSlot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.total >= Self::PER_SERVER {
            return Err(Refusal::Server);
        }
        if open.tenants.get(&tenant).copied().unwrap_or(0) >= Self::PER_TENANT {
            return Err(Refusal::Tenant);
        }
        if open.users.get(&user).copied().unwrap_or(0) >= Self::PER_USER {
            return Err(Refusal::User);
        }
        open.total += 1;
        *open.tenants.entry(tenant).or_insert(0) += 1;
        *open.users.entry(user).or_insert(0) += 1;
        Ok(StreamSlot {
            streams: self.clone(),
            user,
            tenant,
        })
    }
}

/// One open stream's place in its user's, its tenant's and the server's counts.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    user: UserId,
    tenant: TenantId,
}

fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(key);
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        release(&mut open.users, &self.user);
        release(&mut open.tenants, &self.tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> UserId {
        UserId(uuid::Uuid::new_v4())
    }

    fn tenant() -> TenantId {
        TenantId(uuid::Uuid::new_v4())
    }

    #[test]
    fn a_user_holds_at_most_so_many_streams_and_closing_one_frees_it() {
        let streams = Arc::new(Streams::default());
        let (ada, bob, team) = (user(), user(), tenant());
        let mut held: Vec<StreamSlot> = (0..Streams::PER_USER)
            .map(|_| streams.open(ada, team).unwrap())
            .collect();
        assert_eq!(streams.open(ada, team).unwrap_err(), Refusal::User);
        assert!(streams.open(bob, team).is_ok());
        held.pop();
        assert!(streams.open(ada, team).is_ok());
        drop(held);
        let open = streams.open.lock().unwrap();
        assert!(!open.users.contains_key(&ada) && open.total == 0 && open.tenants.is_empty());
    }

    /// A tenant admin who creates users cannot take the server's streams from other tenants.
    #[test]
    fn a_tenants_users_together_hold_at_most_the_tenants_share() {
        let streams = Arc::new(Streams::default());
        let (greedy, other) = (tenant(), tenant());
        let mut held = Vec::new();
        let mut refused = None;
        for _ in 0..33 {
            let someone = user();
            for _ in 0..Streams::PER_USER {
                match streams.open(someone, greedy) {
                    Ok(slot) => held.push(slot),
                    Err(why) => refused = Some(why),
                }
            }
        }
        assert_eq!(held.len(), Streams::PER_TENANT);
        assert_eq!(refused, Some(Refusal::Tenant));
        assert!(
            streams.open(user(), other).is_ok(),
            "another tenant still gets one"
        );
    }

    #[test]
    fn the_server_holds_at_most_its_ceiling() {
        let streams = Arc::new(Streams::default());
        let held: Vec<StreamSlot> = (0..Streams::PER_SERVER)
            .map(|i| {
                streams
                    .open(user(), TenantId(uuid::Uuid::from_u128(i as u128 / 8)))
                    .unwrap()
            })
            .collect();
        assert_eq!(streams.open(user(), tenant()).unwrap_err(), Refusal::Server);
        drop(held);
        assert!(streams.open(user(), tenant()).is_ok());
    }
}
