//! The executor's program inside an image's root: the task shim is this program, linked against the
//! host's C library, which an image may not have (or have in another version). So an image's
//! sandbox gets the program, the host's dynamic loader and the folders of the libraries it needs,
//! read-only under `/.drover`, and runs the program through that loader with those folders as its
//! only library path. The command the shim then starts is the image's own and loads the image's
//! libraries: nothing of the host's is on its path.

use std::path::{Path, PathBuf};

/// Where the program and its libraries are inside an image's root.
pub const INSIDE: &str = "/.drover";

/// The program and what it needs from the host to run in a foreign root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProgram {
    program: PathBuf,
    /// The dynamic loader (`ld-linux-x86-64.so.2`), as a real path; `None` for a static program.
    loader: Option<PathBuf>,
    /// The folders its shared libraries are in (real paths), in the order found.
    library_dirs: Vec<PathBuf>,
}

impl HostProgram {
    /// `program`'s loader and library folders, as `ldd` lists them.
    pub async fn find(program: &Path) -> Result<HostProgram, String> {
        let output = tokio::process::Command::new("ldd")
            .arg(program)
            .output()
            .await
            .map_err(|err| format!("cannot run ldd on {}: {err}", program.display()))?;
        let listed = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            // A static program needs nothing of the host's.
            if listed.contains("not a dynamic executable")
                || String::from_utf8_lossy(&output.stderr).contains("not a dynamic executable")
            {
                return Ok(HostProgram {
                    program: program.to_path_buf(),
                    loader: None,
                    library_dirs: Vec::new(),
                });
            }
            return Err(format!(
                "ldd {} failed: {}",
                program.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Self::from_ldd(program, &listed)
    }

    /// From `ldd`'s listing: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` for a library,
    /// `/lib64/ld-linux-x86-64.so.2 (0x…)` for the loader.
    fn from_ldd(program: &Path, listed: &str) -> Result<HostProgram, String> {
        let mut loader = None;
        let mut library_dirs: Vec<PathBuf> = Vec::new();
        for line in listed.lines().map(str::trim) {
            let path = match line.split_once("=>") {
                Some((name, rest)) => {
                    let path = rest.trim().split(" (").next().unwrap_or_default().trim();
                    if path == "not found" {
                        return Err(format!(
                            "{} needs {} and it is not found",
                            program.display(),
                            name.trim()
                        ));
                    }
                    path
                }
                None if line.starts_with('/') => {
                    let path = line.split(" (").next().unwrap_or_default().trim();
                    let real = real(path)?;
                    if let Some(dir) = real.parent() {
                        push_unique(&mut library_dirs, dir.to_path_buf());
                    }
                    loader = Some(real);
                    continue;
                }
                None => continue, // linux-vdso.so.1: the kernel's
            };
            if path.is_empty() {
                continue;
            }
            if let Some(dir) = real(path)?.parent() {
                push_unique(&mut library_dirs, dir.to_path_buf());
            }
        }
        let Some(loader) = loader else {
            return Err(format!(
                "ldd names no dynamic loader for {}",
                program.display()
            ));
        };
        Ok(HostProgram {
            program: program.to_path_buf(),
            loader: Some(loader),
            library_dirs,
        })
    }

    /// What to bind read-only into the root: (host path, path inside).
    pub fn binds(&self) -> Vec<(PathBuf, PathBuf)> {
        let inside = Path::new(INSIDE);
        let mut binds = vec![(self.program.clone(), inside.join("drover"))];
        binds.extend(
            self.library_dirs
                .iter()
                .enumerate()
                .map(|(i, dir)| (dir.clone(), inside.join(format!("lib{i}")))),
        );
        binds
    }

    /// The arguments that run the program inside the root (the program's own follow).
    pub fn argv(&self) -> Vec<String> {
        let inside = Path::new(INSIDE);
        let program = inside.join("drover").display().to_string();
        let Some(loader) = &self.loader else {
            return vec![program];
        };
        let position = |dir: &Path| self.library_dirs.iter().position(|d| d == dir);
        let loader_inside = loader
            .parent()
            .and_then(position)
            .zip(loader.file_name())
            .map(|(i, name)| inside.join(format!("lib{i}")).join(name));
        let library_path = (0..self.library_dirs.len())
            .map(|i| inside.join(format!("lib{i}")).display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        vec![
            loader_inside.map_or_else(String::new, |l| l.display().to_string()),
            "--library-path".to_owned(),
            library_path,
            program,
        ]
    }
}

fn real(path: &str) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|err| format!("cannot resolve {path}: {err}"))
}

fn push_unique(dirs: &mut Vec<PathBuf>, dir: PathBuf) {
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_programs_loader_and_libraries_are_found_and_run_from_inside() {
        let exe = std::env::current_exe().unwrap();
        let found = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(HostProgram::find(&exe))
            .unwrap();
        let loader = found
            .loader
            .clone()
            .expect("a dynamically linked test program");
        assert!(loader.is_absolute() && loader.exists());
        let binds = found.binds();
        assert_eq!(binds[0], (exe, PathBuf::from("/.drover/drover")));
        assert!(binds.iter().skip(1).all(|(host, inside)| host.is_dir()
            && inside.display().to_string().starts_with("/.drover/lib")));
        let argv = found.argv();
        assert_eq!(argv.len(), 4);
        assert!(argv[0].starts_with("/.drover/lib"), "{argv:?}");
        assert_eq!(argv[1], "--library-path");
        assert_eq!(argv[3], "/.drover/drover");
        // The loader's folder is one of the bound ones, under the name it has on the host.
        let (host_dir, inside_dir) = binds
            .iter()
            .find(|(_, inside)| argv[0].starts_with(&inside.display().to_string()))
            .unwrap();
        assert_eq!(
            host_dir.join(Path::new(&argv[0]).strip_prefix(inside_dir).unwrap()),
            loader
        );
    }

    #[test]
    fn a_missing_library_is_an_error() {
        let err = HostProgram::from_ldd(
            Path::new("/x"),
            "\tlibnope.so.1 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n",
        )
        .unwrap_err();
        assert!(err.contains("libnope.so.1"), "{err}");
    }
}
