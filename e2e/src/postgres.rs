//! A Postgres server of a test's own, which the test may restart (the faults and durability tests).

use crate::ports::free_port;

/// A Postgres server of this test's own, which it may restart: `initdb` and `pg_ctl` from PATH or
/// Debian's versioned directory, run as `postgres` when the test runs as root.
#[derive(Debug)]
pub struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
    as_postgres: bool,
}

impl OwnPostgres {
    /// `None` when no `initdb` and `pg_ctl` are found.
    pub fn start() -> Option<OwnPostgres> {
        let bin = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .chain(
                std::fs::read_dir("/usr/lib/postgresql")
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|entry| entry.path().join("bin")),
            )
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())?;
        let dir = tempfile::tempdir().unwrap();
        let as_postgres = nix_is_root();
        if as_postgres {
            // Postgres refuses to run as root; scripts/test makes the same user.
            let exists = std::process::Command::new("id")
                .arg("postgres")
                .output()
                .is_ok_and(|out| out.status.success());
            if !exists {
                std::process::Command::new("useradd")
                    .args(["--system", "--no-create-home", "postgres"])
                    .status()
                    .ok()?;
            }
            std::process::Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
        }
        let port = free_port();
        let postgres = OwnPostgres {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = postgres.dir.path().join("data");
        let initdb = postgres.bin.join("initdb");
        let done = postgres.run(
            &initdb,
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
        );
        assert!(done, "initdb failed");
        assert!(postgres.pg_ctl("start"), "pg_ctl start failed");
        Some(postgres)
    }

    fn run(&self, program: &std::path::Path, args: &[&str]) -> bool {
        let mut command = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        };
        command
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `pg_ctl ACTION` (`start`, `stop`, `restart`) on this server; whether it succeeded.
    pub fn pg_ctl(&self, action: &str) -> bool {
        let data = self.dir.path().join("data");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        self.run(
            &self.bin.join("pg_ctl"),
            &[
                action,
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-m",
                "fast",
                "-o",
                &options,
            ],
        )
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.pg_ctl("stop");
    }
}

fn nix_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0"))
}
