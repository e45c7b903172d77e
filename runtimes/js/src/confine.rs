//! What a JavaScript worker process may still ask of the kernel once it serves
//! scripts. Boa has no file, process or network API, so a script reaches none of
//! them through the engine; this is the wall behind that one, for a script that
//! finds a bug in the engine and runs code of its own.
//!
//! On Linux the worker installs a seccomp filter (which also sets
//! `no_new_privs`): opening, creating or removing files, sockets, starting
//! programs, forking, signalling or tracing other processes, mounts, namespaces,
//! identity changes, kernel keys, BPF and module loading fail with `EPERM`. It keeps
//! what it needs: reading stdin, writing stdout, memory, threads, clocks, and
//! aborting itself (how it dies at its memory cap). A deny list, not an allow
//! list: an allocator or runtime update that needs a new harmless call keeps
//! working. The worker also starts with an empty environment and only its three
//! standard streams (the host's descriptors are close-on-exec). Not applied: user,
//! mount and network namespaces (unprivileged user namespaces are disabled on
//! many hosts) and a read-only view of the filesystem.

/// System calls refused to a worker, with `EPERM`.
#[cfg(target_os = "linux")]
const DENIED: &[i64] = &[
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_creat,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_ptrace,
    libc::SYS_kill,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_rmdir,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_truncate,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_io_uring_setup,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
];

/// Confines this process as described in the module docs. Call it in the worker
/// process only, never on a thread of the host.
#[cfg(target_os = "linux")]
pub(crate) fn confine_worker() -> Result<(), String> {
    use std::collections::BTreeMap;

    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for this architecture: {e:?}"))?;
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("the seccomp filter is invalid: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("the seccomp filter did not compile: {e:?}"))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot apply seccomp: {e}"))
}

/// Elsewhere the worker runs without a filter (README: what is applied where).
#[cfg(not(target_os = "linux"))]
pub(crate) fn confine_worker() -> Result<(), String> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs only as a child of the test below: confines itself, then tries.
    #[test]
    #[ignore = "run by a_confined_worker_cannot_open_files_start_programs_or_connect"]
    fn confined_child_tries_what_a_worker_must_not() {
        confine_worker().expect("the filter applies");
        let open = std::fs::File::open("/etc/hostname").map(|_| ());
        let spawn = Command::new("/bin/true").status().map(|_| ());
        let connect = std::net::TcpStream::connect("127.0.0.1:9").map(|_| ());
        let write = std::fs::write("/tmp/codeact-confined-write", b"x");
        let mut allowed = Vec::new();
        for (what, result) in [
            ("open", open),
            ("spawn", spawn),
            ("connect", connect),
            ("write", write),
        ] {
            match result {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
                other => allowed.push(format!("{what}: {other:?}")),
            }
        }
        let v: Vec<u8> = vec![7; 64 << 20];
        println!("CONFINED: memory still works ({})", v.len());
        println!("CONFINED: allowed [{}]", allowed.join("; "));
    }

    /// If this fails, a script that escaped Boa could open files, start programs or
    /// reach the network from the worker.
    #[test]
    fn a_confined_worker_cannot_open_files_start_programs_or_connect() {
        let exe = std::env::current_exe().expect("the test binary's path");
        let output = Command::new(exe)
            .args([
                "--exact",
                "confine::tests::confined_child_tries_what_a_worker_must_not",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .output()
            .expect("the child test runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains("CONFINED: memory still works")
                && stdout.contains("CONFINED: allowed []"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
