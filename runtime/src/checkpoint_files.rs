//! Reading a checkpoint out of the checkpoint storage for a download, where tasks can write: every
//! file is opened first and then judged by what it really is, never by its path, so no symlink a task
//! plants or swaps in can lead the server outside the job's own directory.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The most files a checkpoint directory may hold for a download (a sharded checkpoint has
/// hundreds).
pub const MAX_FILES: usize = 100_000;

/// Opens `path` for reading if the file it opens is a regular file inside `root`, judged by the open
/// file itself (its `/proc/self/fd` link), so no symlink swapped in at any moment leads elsewhere.
/// It opens without blocking, so a named pipe a task planted is refused rather than waited on.
pub fn open_within(path: &Path, root: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY).bits())
        .open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    if !real.starts_with(root) || !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} leads to {}", path.display(), real.display()),
        ));
    }
    Ok(file)
}

/// The regular files under `dir`, each with its name in the archive (under the directory's own
/// name), in name order; symlinks and anything else are left out. More than [`MAX_FILES`] is an
/// error.
pub fn list_directory(dir: &Path) -> std::io::Result<Vec<(PathBuf, PathBuf)>> {
    let name = dir
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| "checkpoint".into());
    let mut files = Vec::new();
    list_tree(dir, &name, &mut files)?;
    Ok(files)
}

fn list_tree(dir: &Path, name: &Path, files: &mut Vec<(PathBuf, PathBuf)>) -> std::io::Result<()> {
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        // The entry's own type: a symlink is never followed.
        let kind = entry.file_type()?;
        let entry_name = name.join(entry.file_name());
        if kind.is_dir() {
            list_tree(&entry.path(), &entry_name, files)?;
        } else if kind.is_file() {
            if files.len() >= MAX_FILES {
                return Err(std::io::Error::other(format!(
                    "the checkpoint holds more than {MAX_FILES} files"
                )));
            }
            files.push((entry.path(), entry_name));
        }
    }
    Ok(())
}

/// Writes a tar archive of `files` (from [`list_directory`]) to `out` as it goes, each file opened
/// with `open_within(root)` just before it is copied. Nothing is staged: a reader that goes away
/// stops it at the next write.
pub fn write_tar(
    files: &[(PathBuf, PathBuf)],
    root: &Path,
    out: impl Write,
) -> std::io::Result<()> {
    let mut builder = tar::Builder::new(out);
    for (path, name) in files {
        let file = open_within(path, root)?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&file.metadata()?);
        builder.append_data(&mut header, name, file)?;
    }
    builder.into_inner()?.flush()
}

#[cfg(test)]
mod tests {
    use super::{list_directory, open_within, write_tar};

    #[test]
    fn downloads_never_leave_the_jobs_directory() {
        let storage = tempfile::tempdir().unwrap();
        let root = storage.path().canonicalize().unwrap().join("job");
        let checkpoint = root.join("g1").join("step-1");
        std::fs::create_dir_all(&checkpoint).unwrap();
        std::fs::write(checkpoint.join("model.safetensors"), b"weights").unwrap();
        let secret = storage.path().join("secret-key");
        std::fs::write(&secret, b"server key").unwrap();
        std::os::unix::fs::symlink(&secret, checkpoint.join("leak")).unwrap();

        assert!(open_within(&checkpoint.join("model.safetensors"), &root).is_ok());
        let escaped = open_within(&checkpoint.join("leak"), &root).unwrap_err();
        assert_eq!(escaped.kind(), std::io::ErrorKind::PermissionDenied);

        let mut archive = Vec::new();
        write_tar(&list_directory(&checkpoint).unwrap(), &root, &mut archive).unwrap();
        let names: Vec<String> = tar::Archive::new(archive.as_slice())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["step-1/model.safetensors"]);
    }

    #[test]
    fn a_named_pipe_is_refused_not_waited_on() {
        let storage = tempfile::tempdir().unwrap();
        let root = storage.path().canonicalize().unwrap();
        let pipe = root.join("pipe");
        nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(open_within(&pipe, &root).map(|_| ())));
        let refused = finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("opening a named pipe waited for a writer");
        assert_eq!(
            refused.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }
}
