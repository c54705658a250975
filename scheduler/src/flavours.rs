//! Tenants' quotas per GPU model (flavours, in Kueue's words), as placement holds every policy to
//! them: which GPU models a tenant's new gang may still go on, given the GPUs of each model it holds
//! (its flavour's `max_gpus`) and the guarantees other tenants do not lend (their `lending_limit`).
//!
//! A flavour names a model as a job's `gpu_types` does (a word of the nodes' model, case aside), so
//! one flavour may cover nodes of several reported names, and a node is of every flavour its model
//! matches. Built only when some tenant has flavours; nothing is spent on it otherwise.

use crate::cluster::model_is;
use crate::placement::Placement;
use crate::snapshot::ClusterSnapshot;
use std::sync::Arc;

/// The flavours tenants name, and the nodes of each: fixed for a snapshot, shared by every copy of a
/// [`FlavourBudgets`].
#[derive(Debug)]
pub struct FlavourMap {
    /// Per node, the flavours (indices into `names`) its GPUs are of.
    node_flavours: Vec<Vec<u16>>,
    /// The distinct flavour names, lower-cased.
    names: Vec<String>,
    /// (tenant, flavour, most GPUs it may hold or `u32::MAX`, GPUs of its guarantee it does not lend).
    limits: Vec<(u32, u16, u32, u32)>,
}

impl FlavourMap {
    /// The snapshot's flavours, or `None` when no tenant has any.
    pub fn of(snapshot: &ClusterSnapshot) -> Option<FlavourMap> {
        if snapshot.tenants.iter().all(|t| t.flavours.is_empty()) {
            return None;
        }
        let mut names: Vec<String> = Vec::new();
        let mut limits = Vec::new();
        for (t, tenant) in snapshot.tenants.iter().enumerate() {
            for flavour in &tenant.flavours {
                let name = flavour.gpu_model.trim().to_ascii_lowercase();
                let index = match names.iter().position(|n| *n == name) {
                    Some(index) => index,
                    None => {
                        names.push(name);
                        names.len() - 1
                    }
                };
                let kept = flavour
                    .lending_limit
                    .map_or(0, |lent| flavour.guaranteed_gpus.saturating_sub(lent));
                limits.push((
                    t as u32,
                    index as u16,
                    flavour.max_gpus.unwrap_or(u32::MAX),
                    kept,
                ));
            }
        }
        let node_flavours = snapshot
            .nodes
            .iter()
            .map(|node| {
                let Some(model) = node.gpus.first().map(|g| g.model.as_str()) else {
                    return Vec::new();
                };
                (0..names.len() as u16)
                    .filter(|&f| model_is(model, &names[f as usize]))
                    .collect()
            })
            .collect();
        Some(FlavourMap {
            node_flavours,
            names,
            limits,
        })
    }

    /// The flavours of node `n`'s GPUs.
    pub fn of_node(&self, n: usize) -> &[u16] {
        self.node_flavours.get(n).map_or(&[], Vec::as_slice)
    }

    /// Flavour `f`'s name, lower-cased.
    pub fn name(&self, f: u16) -> &str {
        &self.names[f as usize]
    }

    /// Most GPUs of flavour `f` tenant `t` may hold (`u32::MAX`: no limit of its own).
    pub fn max_of(&self, t: u32, f: u16) -> u32 {
        self.limits
            .iter()
            .find(|l| l.0 == t && l.1 == f)
            .map_or(u32::MAX, |l| l.2)
    }

    /// GPUs of each flavour a placement takes: (flavour, GPUs), flavours in first-seen order.
    pub fn gpus_by_flavour(&self, placement: &Placement) -> Vec<(u16, u32)> {
        let mut by: Vec<(u16, u32)> = Vec::new();
        for task in &placement.tasks {
            if task.gpus.is_empty() {
                continue;
            }
            for &f in self.of_node(task.node.0 as usize) {
                match by.iter_mut().find(|b| b.0 == f) {
                    Some(b) => b.1 += task.gpus.len() as u32,
                    None => by.push((f, task.gpus.len() as u32)),
                }
            }
        }
        by
    }
}

/// What each tenant holds of each flavour, and what is free of each, as a plan is built.
#[derive(Debug, Clone)]
pub struct FlavourBudgets {
    map: Arc<FlavourMap>,
    /// Per flavour: free GPUs on its schedulable nodes.
    free: Vec<u32>,
    /// Parallel to `map.limits`: GPUs of that flavour the tenant holds.
    used: Vec<u32>,
}

impl FlavourBudgets {
    /// Every schedulable GPU free; `free_gpus_on(n)` gives node `n`'s.
    pub fn new(map: FlavourMap, free_gpus_on: impl Fn(usize) -> u32) -> FlavourBudgets {
        let mut free = vec![0u32; map.names.len()];
        for (n, flavours) in map.node_flavours.iter().enumerate() {
            for &f in flavours {
                free[f as usize] += free_gpus_on(n);
            }
        }
        let used = vec![0; map.limits.len()];
        FlavourBudgets {
            map: Arc::new(map),
            free,
            used,
        }
    }

    pub fn map(&self) -> &FlavourMap {
        &self.map
    }

    /// Tenant `tenant` took `gpus` GPUs on node `n`, `newly` of them free until now (the rest it
    /// shares with a job already there).
    pub fn took(&mut self, tenant: u32, n: usize, gpus: u32, newly: u32) {
        for &f in self.map.of_node(n) {
            self.free[f as usize] = self.free[f as usize].saturating_sub(newly);
            if let Some(i) = self
                .map
                .limits
                .iter()
                .position(|l| l.0 == tenant && l.1 == f)
            {
                self.used[i] += gpus;
            }
        }
    }

    /// The flavours on which `tenant` may not place a gang of `gpus` GPUs now: its own maximum of
    /// the flavour would be passed, or the flavour's free GPUs would fall below what other tenants
    /// keep of their unused guarantees there. The whole gang is counted against each model: exact
    /// for a gang kept to one model, cautious for one that spans models.
    pub fn blocked(&self, tenant: u32, gpus: u32) -> Blocked {
        let mut blocked = Blocked::default();
        if gpus == 0 {
            return blocked;
        }
        for f in 0..self.map.names.len() as u16 {
            let mut kept_for_others: u64 = 0;
            let mut over = false;
            for (i, &(t, flavour, max, kept)) in self.map.limits.iter().enumerate() {
                if flavour != f {
                    continue;
                }
                if t == tenant {
                    over |= u64::from(self.used[i]) + u64::from(gpus) > u64::from(max);
                } else {
                    kept_for_others += u64::from(kept.saturating_sub(self.used[i]));
                }
            }
            // Only a limit that exists blocks: a model nobody keeps GPUs of, of which the tenant
            // may hold any number, stays open to a gang that spans it and another model.
            let free = u64::from(self.free[f as usize]);
            let kept_from_it = kept_for_others > 0 && free < u64::from(gpus) + kept_for_others;
            if over || kept_from_it {
                blocked.flavours.push(f);
                blocked.by_own_max |= over;
            }
        }
        blocked
    }

    /// Whether `tenant` may hold `gpus` more GPUs on node `n` by its own maxima (packing onto GPUs
    /// already in use, which no other tenant's kept guarantee counts).
    pub fn within_maxima(&self, tenant: u32, n: usize, gpus: u32) -> bool {
        self.map.of_node(n).iter().all(|&f| {
            self.map
                .limits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.0 == tenant && l.1 == f)
                .all(|(i, l)| u64::from(self.used[i]) + u64::from(gpus) <= u64::from(l.2))
        })
    }

    /// Whether node `n` is of a flavour in `blocked`.
    pub fn node_blocked(&self, n: usize, blocked: &[u16]) -> bool {
        !blocked.is_empty() && self.map.of_node(n).iter().any(|f| blocked.contains(f))
    }
}

/// The flavours a gang may not go on ([`FlavourBudgets::blocked`]).
#[derive(Debug, Default)]
pub struct Blocked {
    pub flavours: Vec<u16>,
    /// Some because the tenant would pass its own maximum (not only others' kept guarantees).
    pub by_own_max: bool,
}
