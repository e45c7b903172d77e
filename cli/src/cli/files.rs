//! The flags that give scripts a working directory (`--files`, `--workdir`,
//! `--mount`…) and `--artifacts`, which copies a result's files out.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;

use codeact::files::{DEFAULT_MAX_DISK_BYTES, FileArea, Mount};
use codeact::output::{FinalOutput, artifact_path};

#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// Give scripts a working directory, a fresh temporary one removed at the end,
    /// and the file helpers read_text(path), write_text(path, text),
    /// list_dir(path) and exists(path), which cannot reach outside it. Implied by
    /// --workdir, --keep-workdir and --mount; without any of them scripts have no
    /// files at all.
    #[arg(long)]
    files: bool,
    /// Use DIR (made if missing, never removed) as the scripts' working directory.
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Keep the temporary working directory after the run; its path is printed
    /// on stderr.
    #[arg(long, conflicts_with = "workdir")]
    keep_workdir: bool,
    /// Show a host file or folder to scripts at GUEST, a path of the working
    /// directory: HOST:GUEST (read-only), HOST:GUEST:ro or HOST:GUEST:rw. Repeatable.
    #[arg(long = "mount", value_name = "HOST:GUEST[:ro|rw]")]
    mounts: Vec<String>,
    /// Megabytes scripts may write in all [default: 64].
    #[arg(long, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_disk_mb: Option<u64>,
}

impl FileArgs {
    /// The working directory the flags ask for; `None` when they ask for none.
    pub(crate) fn area(&self) -> Result<Option<FileArea>, String> {
        let wanted = self.files
            || self.workdir.is_some()
            || self.keep_workdir
            || !self.mounts.is_empty()
            || self.max_disk_mb.is_some();
        if !wanted {
            return Ok(None);
        }
        let mut builder = FileArea::builder().keep(self.keep_workdir).max_disk_bytes(
            self.max_disk_mb
                .map_or(DEFAULT_MAX_DISK_BYTES, |mb| mb.saturating_mul(1 << 20)),
        );
        if let Some(dir) = &self.workdir {
            builder = builder.workdir(dir);
        }
        for spec in &self.mounts {
            builder = builder.mount(Mount::parse(spec).map_err(|e| format!("--mount: {e}"))?);
        }
        let area = builder.open().map_err(|e| e.to_string())?;
        if self.keep_workdir {
            eprintln!(
                "── the working directory is kept at {}",
                area.root().display()
            );
        }
        Ok(Some(area))
    }
}

/// Copies each artifact of `output` that exists under `workdir` into `dest`, at
/// the same relative path; returns how many were copied. The path is checked again
/// (the script may have run on since it was named), and only regular files no
/// longer than `max_bytes` (the run's disk limit) are copied.
pub(crate) fn copy_artifacts(
    output: &FinalOutput,
    workdir: &Path,
    dest: &Path,
    max_bytes: u64,
) -> Result<usize, String> {
    let mut copied = 0;
    for artifact in &output.artifacts {
        let shown = artifact.path.display();
        let relative = artifact_path(workdir, &artifact.path.to_string_lossy())
            .map_err(|e| format!("artifact '{shown}': {e}"))?;
        let Some(mut from) = codeact::output::open_regular_beneath(workdir, &relative) else {
            eprintln!("── artifact {shown} was not written; nothing to copy");
            continue;
        };
        let length = from.metadata().map_or(u64::MAX, |meta| meta.len());
        if length > max_bytes {
            return Err(format!(
                "artifact '{shown}' is {length} bytes long, more than the run's disk limit of {max_bytes}: not copied"
            ));
        }
        let target = dest.join(&relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot make '{}': {e}", parent.display()))?;
        }
        let mut to = std::fs::File::create(&target)
            .map_err(|e| format!("cannot write '{}': {e}", target.display()))?;
        std::io::copy(&mut (&mut from).take(max_bytes), &mut to)
            .map_err(|e| format!("cannot copy '{shown}' to '{}': {e}", target.display()))?;
        copied += 1;
    }
    Ok(copied)
}
