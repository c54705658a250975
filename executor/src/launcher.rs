//! The launchers of `command` jobs (`spec.distributed.launcher`): the variables `torchrun` and
//! `jax.distributed` give each process, from the task's place in its generation, and how many
//! processes a task starts (`torch`: one per GPU, one without GPUs). The shim starts them
//! (`crate::shim`), each with its own `LOCAL_RANK` and `RANK`.

use drover_proto as pb;

/// A `command` job's launcher, as the server names it in the task's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    None,
    Torch,
    Jax,
}

impl Launcher {
    /// The launcher a task spec names; an unknown name (a newer server's) is an error, not `none`.
    pub fn of(spec: &pb::TaskSpec) -> Result<Launcher, String> {
        match spec.launcher.as_str() {
            "" | "none" => Ok(Launcher::None),
            "torch" => Ok(Launcher::Torch),
            "jax" => Ok(Launcher::Jax),
            other => Err(format!(
                "launcher `{other}` is not known to this executor (upgrade it)"
            )),
        }
    }

    /// How many processes one task starts: `torch` one per GPU of the worker (one without GPUs),
    /// the others one.
    pub fn processes(self, spec: &pb::TaskSpec) -> u32 {
        match self {
            Launcher::Torch => (spec.gpus.len() as u32).max(1),
            Launcher::None | Launcher::Jax => 1,
        }
    }
}

/// `host:port` split at its last colon; an IPv6 host loses its brackets.
fn host_and_port(address: &str) -> (&str, &str) {
    let (host, port) = address.rsplit_once(':').unwrap_or((address, ""));
    (host.trim_start_matches('[').trim_end_matches(']'), port)
}

/// The launcher's variables for the task's first process (the shim gives a later local process its
/// own `LOCAL_RANK` and `RANK`). `peers` are the generation's addresses in rank order: the first
/// worker's is the rendezvous (`MASTER_ADDR:MASTER_PORT`, the JAX coordinator), which that worker's
/// first process listens on.
pub fn env(
    launcher: Launcher,
    spec: &pb::TaskSpec,
    key: &pb::TaskKey,
    peers: &[String],
) -> Vec<(&'static str, String)> {
    let Some(first) = peers.first() else {
        return Vec::new();
    };
    let (host, port) = host_and_port(first);
    // A launcher's ranks are the workers (validation refuses PS shards beside one).
    let node = spec.rank;
    let nodes = spec.num_workers;
    match launcher {
        Launcher::None => Vec::new(),
        Launcher::Torch => {
            let local = launcher.processes(spec);
            let world = nodes * local;
            let rank = node * local;
            vec![
                ("MASTER_ADDR", host.to_owned()),
                ("MASTER_PORT", port.to_owned()),
                ("WORLD_SIZE", world.to_string()),
                ("RANK", rank.to_string()),
                ("LOCAL_RANK", "0".to_owned()),
                ("LOCAL_WORLD_SIZE", local.to_string()),
                ("NODE_RANK", node.to_string()),
                ("GROUP_RANK", node.to_string()),
                ("GROUP_WORLD_SIZE", nodes.to_string()),
                ("ROLE_NAME", "default".to_owned()),
                ("ROLE_RANK", rank.to_string()),
                ("ROLE_WORLD_SIZE", world.to_string()),
                ("TORCHELASTIC_RUN_ID", key.job_id.clone()),
                // Every generation is a restart of the whole group, as torchrun's agent restarts it.
                (
                    "TORCHELASTIC_RESTART_COUNT",
                    key.generation.saturating_sub(1).to_string(),
                ),
                ("TORCHELASTIC_MAX_RESTARTS", "0".to_owned()),
                ("TORCHELASTIC_USE_AGENT_STORE", "False".to_owned()),
            ]
        }
        Launcher::Jax => vec![
            ("JAX_COORDINATOR_ADDRESS", format!("{host}:{port}")),
            ("JAX_NUM_PROCESSES", nodes.to_string()),
            ("JAX_PROCESS_ID", node.to_string()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(launcher: &str, rank: u32, workers: u32, gpus: &[u32]) -> pb::TaskSpec {
        pb::TaskSpec {
            launcher: launcher.to_owned(),
            rank,
            num_workers: workers,
            gpus: gpus.to_vec(),
            ..pb::TaskSpec::default()
        }
    }

    fn key(generation: u64) -> pb::TaskKey {
        pb::TaskKey {
            job_id: "job-1".to_owned(),
            generation,
            ..pb::TaskKey::default()
        }
    }

    fn get<'a>(env: &'a [(&'static str, String)], name: &str) -> &'a str {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{name} not set"))
    }

    /// The second of three workers with two GPUs each: ranks 2 and 3 of 6, the first worker's
    /// address the rendezvous, as torchrun --nnodes 3 --nproc-per-node 2 --node-rank 1 sets them.
    #[test]
    fn torch_ranks_count_every_gpu_of_every_worker() {
        let peers = ["10.0.0.1:29400".to_owned(), "10.0.0.2:29401".to_owned()];
        let s = spec("torch", 1, 3, &[4, 5]);
        let launcher = Launcher::of(&s).unwrap();
        assert_eq!(launcher.processes(&s), 2);
        let env = env(launcher, &s, &key(3), &peers);
        assert_eq!(get(&env, "MASTER_ADDR"), "10.0.0.1");
        assert_eq!(get(&env, "MASTER_PORT"), "29400");
        assert_eq!(get(&env, "WORLD_SIZE"), "6");
        assert_eq!(get(&env, "RANK"), "2");
        assert_eq!(get(&env, "LOCAL_RANK"), "0");
        assert_eq!(get(&env, "LOCAL_WORLD_SIZE"), "2");
        assert_eq!(get(&env, "GROUP_RANK"), "1");
        assert_eq!(get(&env, "NODE_RANK"), "1");
        assert_eq!(get(&env, "TORCHELASTIC_RESTART_COUNT"), "2");
    }

    #[test]
    fn a_worker_without_gpus_is_one_process() {
        let s = spec("torch", 0, 2, &[]);
        assert_eq!(Launcher::Torch.processes(&s), 1);
        let env = env(Launcher::Torch, &s, &key(1), &["[::1]:7000".to_owned()]);
        assert_eq!(get(&env, "MASTER_ADDR"), "::1");
        assert_eq!(get(&env, "WORLD_SIZE"), "2");
    }

    #[test]
    fn jax_is_one_process_per_worker() {
        let s = spec("jax", 2, 4, &[0, 1]);
        let launcher = Launcher::of(&s).unwrap();
        assert_eq!(launcher.processes(&s), 1);
        let env = env(launcher, &s, &key(1), &["h0:1234".to_owned()]);
        assert_eq!(get(&env, "JAX_COORDINATOR_ADDRESS"), "h0:1234");
        assert_eq!(get(&env, "JAX_NUM_PROCESSES"), "4");
        assert_eq!(get(&env, "JAX_PROCESS_ID"), "2");
    }

    #[test]
    fn no_launcher_adds_nothing_and_an_unknown_one_is_an_error() {
        let s = spec("", 0, 1, &[]);
        assert_eq!(Launcher::of(&s), Ok(Launcher::None));
        assert!(env(Launcher::None, &s, &key(1), &["h:1".to_owned()]).is_empty());
        assert!(Launcher::of(&spec("mpi", 0, 1, &[])).is_err());
    }
}
