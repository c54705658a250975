//! Reading a checkpoint out of the checkpoint storage for a download, where tasks can write: every
//! file is opened first and then judged by what it really is, never by its path, so no symlink a task
//! plants or swaps in can lead the server outside the job's own directory.

/// Opens `path` for reading if the file it opens is a regular file inside `root`, judged by the open
/// file itself (its `/proc/self/fd` link), so no symlink swapped in at any moment leads elsewhere.
pub fn open_within(
    path: &std::path::Path,
    root: &std::path::Path,
) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    if !real.starts_with(root) || !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} leads to {}", path.display(), real.display()),
        ));
    }
    Ok(file)
}

/// A tar archive of `dir` in an anonymous temporary file, rewound: its regular files, each opened
/// with `open_within(root)`; symlinks and anything else are left out.
pub fn tar_directory(
    dir: &std::path::Path,
    root: &std::path::Path,
) -> std::io::Result<std::fs::File> {
    use std::io::{Seek, SeekFrom};
    let file = tempfile::tempfile()?;
    let mut builder = tar::Builder::new(file);
    let name = dir
        .file_name()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "checkpoint".into());
    append_tree(&mut builder, dir, &name, root)?;
    let mut file = builder.into_inner()?;
    file.seek(SeekFrom::Start(0))?;
    Ok(file)
}

fn append_tree(
    builder: &mut tar::Builder<std::fs::File>,
    dir: &std::path::Path,
    name: &std::path::Path,
    root: &std::path::Path,
) -> std::io::Result<()> {
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        // The entry's own type: a symlink is never followed.
        let kind = entry.file_type()?;
        let entry_name = name.join(entry.file_name());
        if kind.is_dir() {
            append_tree(builder, &entry.path(), &entry_name, root)?;
        } else if kind.is_file() {
            let file = open_within(&entry.path(), root)?;
            let mut header = tar::Header::new_gnu();
            header.set_metadata(&file.metadata()?);
            builder.append_data(&mut header, &entry_name, file)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{open_within, tar_directory};

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

        let archive = tar_directory(&checkpoint, &root).unwrap();
        let names: Vec<String> = tar::Archive::new(archive)
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["step-1/model.safetensors"]);
    }
}
