//! What a JavaScript worker process may still reach once it serves scripts. Boa
//! has no file, process or network API, so a script reaches none of them through
//! the engine; this is the wall behind that one, for a script that finds a bug in
//! the engine and runs code of its own.
//!
//! On Linux, before it serves, the worker ([`confine_worker`]):
//!
//! 1. **Dies with its host.** `PR_SET_PDEATHSIG` has the kernel SIGKILL it when
//!    the host ends, however it ends; then the worker checks that its parent is
//!    still the host whose pid it was given, and exits if not (the host died
//!    before the request took effect). The kernel ties the signal to the host
//!    *thread* that started the worker, so the host starts its workers from one
//!    thread that lasts as long as the process (`session.rs`).
//! 2. **Holds only its three standard streams.** Every other descriptor is closed:
//!    one the host, the app embedding it or the host's own parent left without
//!    close-on-exec (a database, a socket) is not the worker's to use. They are
//!    listed from `/proc/self/fd`; without `/proc`, every number below the
//!    `RLIMIT_NOFILE` soft limit is closed (one call each).
//! 3. **Is not dumpable** (`PR_SET_DUMPABLE` 0): a process of the same user can
//!    neither ptrace it nor read its `/proc` files (memory, environment), and it
//!    writes no core file (`RLIMIT_CORE` is 0 too) with a tenant's data in it.
//! 4. **Makes only the system calls of an allow-list**, with a seccomp filter
//!    (which also sets `no_new_privs`). Everything else fails with `EPERM`, not a
//!    kill, so a call the list missed is an error the worker reports rather than
//!    a crash without a message. A refusal opens no other way: whatever code does
//!    after an error (glibc, std, an exploit) goes through the same list, and the
//!    calls that would lift the wall (`prctl`, `seccomp`, `setrlimit` of anything
//!    but the CPU limit, which root could otherwise use to lift its memory cap)
//!    are refused too. A system call of another ABI (32-bit `int 0x80` on x86-64),
//!    whose numbers mean other calls, kills the process; x32 numbers match nothing.
//!
//! The allow-list, found by tracing the worker through its tests (Boa, Rust's
//! std, glibc's allocator; the worker starts no threads):
//!
//! | calls | why |
//! | --- | --- |
//! | `read`, `write` | requests on stdin, replies on stdout, a panic's message on stderr |
//! | `poll`, `ppoll` | waiting for the host's next line (`src/wait.rs`): on the descriptors it holds, the only ones it has |
//! | `brk`, `mmap`, `munmap`, `mremap`, `mprotect`, `madvise` | the allocator and Boa's heap; `mmap` only anonymous, neither it nor `mprotect` executable (Boa has no JIT); `madvise` only to give pages back |
//! | `futex` | std's locks and one-time initialisation |
//! | `getrandom` | hash-map keys, `Math.random` |
//! | `clock_gettime` | `Date`, and the CPU clock of the worker's own deadline (the vDSO answers most reads without a call) |
//! | `prlimit64` | the own deadline: its own `RLIMIT_CPU` only |
//! | `rt_sigaction`, `rt_sigprocmask`, `rt_sigreturn`, `sigaltstack`, `getpid`, `gettid`, `tgkill`, `kill` | aborting itself (how it ends at its memory cap) and std's stack-overflow handler; `tgkill` and `kill` only aimed at its own pid |
//! | `exit`, `exit_group` | ending |
//!
//! So, among others: opening files, `mknod`, sockets, `execve`, `clone`/`clone3`,
//! `fork` and threads, every `pidfd_*` call (`pidfd_getfd` copied a host's
//! descriptors), `process_vm_*`, `ptrace`, `tkill`, `rt_sigqueueinfo`,
//! signals to any other process, mounts, namespaces, identity changes, keys, BPF
//! and module loading are refused. Boa looks for the local time zone
//! (`/etc/localtime`) when it starts, is refused, and keeps UTC.
//!
//! **The worker's own deadline** ([`arm_own_deadline`], before each run): the
//! soft `RLIMIT_CPU` is set to the CPU time used so far plus the run's wall-time
//! limit plus [`OWN_DEADLINE_GRACE`], rounded up to whole seconds; past it the
//! kernel ends the worker with SIGXCPU. A run uses CPU no faster than wall time
//! (one thread), so the host, which kills at the wall-time limit, acts first
//! while it is alive; the limit bounds a run whose host is stuck or gone (a host
//! that is gone also kills it through step 1). It counts CPU, so a run waiting
//! for a tool uses none of it. It guards against runaway scripts, not against
//! code that escaped the engine, which could raise the soft limit up to the hard
//! one (left as inherited, normally unlimited) but would still die with the host.
//! Cost: three system calls per run, a few microseconds in all.
//!
//! Elsewhere (not Linux) the worker runs without any of this, its memory capped
//! only; the host still kills it at the deadline. Not applied on Linux either:
//! user, mount and network namespaces (unprivileged user namespaces are disabled
//! on many hosts) and a read-only view of the filesystem.

use std::time::Duration;

/// How much CPU time past its wall-time limit a run may use before the worker's
/// own deadline ends it (1 s): room for the host, which kills at the limit, to
/// act first.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const OWN_DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// Confines this process as the module docs describe, in order: dies with the
/// host `host` (a pid), keeps only its standard streams, turns dumpable off,
/// installs the seccomp filter. Call it in a worker process only, never on a
/// thread of the host: it closes descriptors and cannot be undone.
#[cfg(target_os = "linux")]
pub(crate) fn confine_worker(host: u32) -> Result<(), String> {
    contain(host)?;
    install_filter()
}

/// Elsewhere the worker is not confined (module docs).
#[cfg(not(target_os = "linux"))]
pub(crate) fn confine_worker(_host: u32) -> Result<(), String> {
    Ok(())
}

/// Steps 1 to 3 of the module docs: everything but the filter.
#[cfg(target_os = "linux")]
fn contain(host: u32) -> Result<(), String> {
    use nix::sys::{prctl, signal::Signal};

    prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| format!("cannot ask to die with the host: {e}"))?;
    // A host that died before the line above left this process to another
    // parent, which no death signal will come from.
    let parent = nix::unistd::getppid().as_raw();
    if u32::try_from(parent).ok() != Some(host) {
        return Err(format!(
            "its host (pid {host}) is gone: the parent is now pid {parent}"
        ));
    }
    close_inherited_descriptors();
    prctl::set_dumpable(false).map_err(|e| format!("cannot turn dumpable off: {e}"))?;
    rlimit::setrlimit(rlimit::Resource::CORE, 0, 0)
        .map_err(|e| format!("cannot turn core files off: {e}"))
}

/// Closes every descriptor but stdin, stdout and stderr.
#[cfg(target_os = "linux")]
fn close_inherited_descriptors() {
    let listed: Option<Vec<i32>> = std::fs::read_dir("/proc/self/fd").ok().map(|entries| {
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    });
    let numbers = listed.unwrap_or_else(|| {
        let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap_or((1024, 1024));
        (0..i32::try_from(soft).unwrap_or(i32::MAX)).collect()
    });
    for fd in numbers.into_iter().filter(|&fd| fd > 2) {
        // The listing's own descriptor is among them, already closed: EBADF. Any
        // other error still leaves the number closed (close(2)).
        let _ = nix::unistd::close(fd);
    }
}

/// Step 4 of the module docs: the seccomp allow-list, for this process.
#[cfg(target_os = "linux")]
fn install_filter() -> Result<(), String> {
    let program = filter_program(std::process::id())?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot apply seccomp: {e}"))
}

/// The filter for a worker whose pid is `own_pid`: the allow-list of the module
/// docs, everything else `EPERM`.
#[cfg(target_os = "linux")]
fn filter_program(own_pid: u32) -> Result<seccompiler::BpfProgram, String> {
    use seccompiler::{SeccompAction, SeccompFilter, TargetArch};

    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for this architecture: {e:?}"))?;
    let rules = allowed(own_pid).map_err(|e| format!("a seccomp rule is invalid: {e}"))?;
    let filter = SeccompFilter::new(
        rules.into_iter().collect(),
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("the seccomp filter is invalid: {e}"))?;
    filter
        .try_into()
        .map_err(|e| format!("the seccomp filter did not compile: {e:?}"))
}

/// The system calls a worker makes, each with the conditions on its arguments
/// (any one rule passing allows the call; no rule: always allowed).
#[cfg(target_os = "linux")]
fn allowed(
    own_pid: u32,
) -> Result<Vec<(i64, Vec<seccompiler::SeccompRule>)>, seccompiler::BackendError> {
    use seccompiler::SeccompCmpArgLen::Dword;
    use seccompiler::{SeccompCmpOp, SeccompCondition, SeccompRule};

    // Every argument tested here is 32 bits wide in the kernel (an int, or flags
    // in the low bits), so only the low half is compared.
    let is =
        |arg: u8, value: i64| SeccompCondition::new(arg, Dword, SeccompCmpOp::Eq, value as u64);
    let lacks = |arg: u8, bits: i64| {
        SeccompCondition::new(arg, Dword, SeccompCmpOp::MaskedEq(bits as u64), 0)
    };
    let has = |arg: u8, bits: i64| {
        SeccompCondition::new(arg, Dword, SeccompCmpOp::MaskedEq(bits as u64), bits as u64)
    };
    let always = Vec::new;
    let own_pid = i64::from(own_pid);
    let (exec, anonymous) = (i64::from(libc::PROT_EXEC), i64::from(libc::MAP_ANONYMOUS));
    let mut rules = vec![
        // Requests on stdin, replies on stdout, a panic's message on stderr.
        (libc::SYS_read, always()),
        (libc::SYS_write, always()),
        // Waiting for the host's next line (glibc's `poll` is either call).
        (libc::SYS_ppoll, always()),
        // The allocator and Boa's heap: anonymous, never executable memory.
        (libc::SYS_brk, always()),
        (
            libc::SYS_mmap,
            vec![SeccompRule::new(vec![lacks(2, exec)?, has(3, anonymous)?])?],
        ),
        (
            libc::SYS_mprotect,
            vec![SeccompRule::new(vec![lacks(2, exec)?])?],
        ),
        (libc::SYS_munmap, always()),
        (libc::SYS_mremap, always()),
        (
            libc::SYS_madvise,
            vec![
                SeccompRule::new(vec![is(2, i64::from(libc::MADV_DONTNEED))?])?,
                SeccompRule::new(vec![is(2, i64::from(libc::MADV_FREE))?])?,
            ],
        ),
        // std's locks and one-time initialisation.
        (libc::SYS_futex, always()),
        // Hash-map keys, Math.random.
        (libc::SYS_getrandom, always()),
        // Date, and the CPU clock of the own deadline.
        (libc::SYS_clock_gettime, always()),
        // The own deadline: this process's (pid 0) CPU limit, no other limit.
        (
            libc::SYS_prlimit64,
            vec![SeccompRule::new(vec![
                is(0, 0)?,
                is(1, i64::from(libc::RLIMIT_CPU))?,
            ])?],
        ),
        // Aborting itself and std's stack-overflow handler: signals to itself.
        (libc::SYS_rt_sigaction, always()),
        (libc::SYS_rt_sigprocmask, always()),
        (libc::SYS_rt_sigreturn, always()),
        (libc::SYS_sigaltstack, always()),
        (libc::SYS_getpid, always()),
        (libc::SYS_gettid, always()),
        (
            libc::SYS_tgkill,
            vec![SeccompRule::new(vec![is(0, own_pid)?])?],
        ),
        (
            libc::SYS_kill,
            vec![SeccompRule::new(vec![is(0, own_pid)?])?],
        ),
        // Ending.
        (libc::SYS_exit, always()),
        (libc::SYS_exit_group, always()),
    ];
    #[cfg(target_arch = "x86_64")]
    rules.push((libc::SYS_poll, always()));
    Ok(rules)
}

/// Arms the worker's own deadline for a run of `wall_time` (module docs): the soft
/// `RLIMIT_CPU` at the CPU time used so far plus `wall_time` plus
/// [`OWN_DEADLINE_GRACE`], in whole seconds, at most the hard limit.
#[cfg(target_os = "linux")]
pub(crate) fn arm_own_deadline(wall_time: Duration) -> Result<(), String> {
    use nix::time::{ClockId, clock_gettime};

    let used = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map_err(|e| format!("cannot read the CPU clock: {e}"))?;
    let used = Duration::from(used);
    let until = used
        .saturating_add(wall_time)
        .saturating_add(OWN_DEADLINE_GRACE);
    let seconds = until
        .as_secs()
        .saturating_add(u64::from(until.subsec_nanos() > 0));
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::CPU)
        .map_err(|e| format!("cannot read the CPU limit: {e}"))?;
    rlimit::setrlimit(rlimit::Resource::CPU, seconds.min(hard), hard)
        .map_err(|e| format!("cannot set the CPU limit: {e}"))
}

/// Elsewhere the host's deadline is the only one.
#[cfg(not(target_os = "linux"))]
pub(crate) fn arm_own_deadline(_wall_time: Duration) -> Result<(), String> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Error;
    use std::process::Command;

    use super::*;

    /// The environment variable that gives a child test its parent's pid.
    const PARENT: &str = "CODEACT_CONFINE_TEST_PARENT";

    /// This test binary, running only the ignored test `name`.
    fn this_test(name: &str) -> Command {
        let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
        command.args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        command
    }

    /// Runs only as a child of the confined child below: a process it may try to
    /// signal, trace and read, which dies with it.
    #[test]
    #[ignore = "run by confined_child_tries_what_a_worker_must_not"]
    fn sacrificial_sleeper() {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).expect("pdeathsig");
        std::thread::sleep(Duration::from_secs(30));
    }

    /// The error of a call, as std reports it.
    fn outcome<E: Into<Error>>(result: Result<impl Sized, E>) -> Result<(), Error> {
        result.map(|_| ()).map_err(Into::into)
    }

    /// Runs only as a child of the test below: confines itself as a worker does,
    /// tries what a worker must not, reports what was allowed, then aborts.
    #[test]
    #[ignore = "run by a_confined_worker_can_reach_neither_its_host_nor_files_processes_or_the_network"]
    fn confined_child_tries_what_a_worker_must_not() {
        use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, Signal};

        let parent: u32 = std::env::var(PARENT)
            .ok()
            .and_then(|pid| pid.parse().ok())
            .expect("the parent's pid");
        // A descendant of this process, so that only the filter (not Yama's
        // ptrace scope) can refuse tracing, reading or signalling it.
        let sleeper = this_test("confine::tests::sacrificial_sleeper")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the sleeper starts");
        let dir = std::env::temp_dir().join(format!("codeact-confine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        println!("CONFINED: temporary directory {}", dir.display());

        contain(parent).expect("the worker contains itself");
        let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|entry| Some(entry.ok()?.file_name().to_string_lossy().into_owned()))
            .collect();
        println!("CONFINED: descriptors {fds:?}");
        println!(
            "CONFINED: dumpable {}",
            nix::sys::prctl::get_dumpable().expect("dumpable")
        );
        let pid = |raw: u32| Pid::from_raw(raw as i32).expect("a pid");
        let (parent_pid, sleeper_pid) = (pid(parent), pid(sleeper.id()));
        // Opened before the filter, to try what an open pidfd would give.
        let parent_pidfd = rustix::process::pidfd_open(parent_pid, PidfdFlags::empty())
            .expect("a pidfd of the parent");
        let sleeper_pidfd = rustix::process::pidfd_open(sleeper_pid, PidfdFlags::empty())
            .expect("a pidfd of the sleeper");
        install_filter().expect("the filter applies");

        let nix_pid = |pid: Pid| nix::unistd::Pid::from_raw(pid.as_raw_nonzero().get());
        let read_memory_of = |pid: Pid| {
            let mut buffer = [0u8; 8];
            let remote = [nix::sys::uio::RemoteIoVec {
                base: 0x1000,
                len: buffer.len(),
            }];
            outcome(nix::sys::uio::process_vm_readv(
                nix_pid(pid),
                &mut [std::io::IoSliceMut::new(&mut buffer)],
                &remote,
            ))
        };
        let tries: Vec<(&str, Result<(), Error>)> = vec![
            ("open a file", outcome(std::fs::File::open("/etc/hostname"))),
            (
                "create a file",
                outcome(std::fs::write(dir.join("x"), b"x")),
            ),
            (
                "mknodat a FIFO",
                outcome(rustix::fs::mknodat(
                    rustix::fs::CWD,
                    dir.join("fifo"),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
                    0,
                )),
            ),
            (
                "connect",
                outcome(std::net::TcpStream::connect("127.0.0.1:9")),
            ),
            (
                "start a program",
                outcome(Command::new("/bin/true").status()),
            ),
            (
                "execve",
                outcome(nix::unistd::execv(c"/bin/true", &[c"/bin/true"])),
            ),
            (
                "start a thread",
                outcome(std::thread::Builder::new().spawn(|| {})),
            ),
            (
                "pidfd_open the parent",
                outcome(rustix::process::pidfd_open(parent_pid, PidfdFlags::empty())),
            ),
            (
                "pidfd_getfd from the parent",
                outcome(rustix::process::pidfd_getfd(
                    &parent_pidfd,
                    0,
                    PidfdGetfdFlags::empty(),
                )),
            ),
            (
                "pidfd_getfd from the sleeper",
                outcome(rustix::process::pidfd_getfd(
                    &sleeper_pidfd,
                    0,
                    PidfdGetfdFlags::empty(),
                )),
            ),
            (
                "pidfd_send_signal to the sleeper",
                outcome(rustix::process::pidfd_send_signal(
                    &sleeper_pidfd,
                    Signal::KILL,
                )),
            ),
            (
                "kill 0 to the parent",
                outcome(rustix::process::test_kill_process(parent_pid)),
            ),
            (
                "kill 0 to its process group",
                outcome(rustix::process::test_kill_current_process_group()),
            ),
            (
                "kill the sleeper",
                outcome(rustix::process::kill_process(sleeper_pid, Signal::KILL)),
            ),
            (
                "ptrace the sleeper",
                outcome(nix::sys::ptrace::attach(nix_pid(sleeper_pid))),
            ),
            ("read the parent's memory", read_memory_of(parent_pid)),
            ("read the sleeper's memory", read_memory_of(sleeper_pid)),
            (
                "set the sleeper's limits",
                outcome(rustix::process::prlimit(
                    Some(sleeper_pid),
                    rustix::process::Resource::Core,
                    rustix::process::Rlimit {
                        current: Some(0),
                        maximum: Some(0),
                    },
                )),
            ),
            (
                "lift its own memory cap",
                outcome(rlimit::setrlimit(
                    rlimit::Resource::DATA,
                    rlimit::INFINITY,
                    rlimit::INFINITY,
                )),
            ),
            (
                "turn dumpable back on",
                outcome(nix::sys::prctl::set_dumpable(true)),
            ),
            (
                "stop dying with the host",
                outcome(nix::sys::prctl::set_pdeathsig(None)),
            ),
        ];
        let allowed: Vec<String> = tries
            .into_iter()
            .filter(|(_, result)| {
                result
                    .as_ref()
                    .err()
                    .and_then(Error::raw_os_error)
                    .is_none_or(|code| code != libc::EPERM)
            })
            .map(|(what, result)| format!("{what}: {result:?}"))
            .collect();
        println!("CONFINED: allowed [{}]", allowed.join("; "));
        let v: Vec<u8> = vec![7; 64 << 20];
        println!("CONFINED: memory still works ({})", v.len());
        arm_own_deadline(Duration::from_secs(5)).expect("the own deadline is armed");
        println!("CONFINED: the own deadline is armed");
        // The sleeper dies with this process.
        std::process::abort();
    }

    /// If this fails, a script that escaped Boa could reach the host (copy its
    /// descriptors, signal, trace or read it), open or create files, start
    /// programs or threads, or reach the network from the worker; or the worker
    /// could no longer allocate, arm its deadline, or die by abort at its memory
    /// cap (the host reads SIGABRT as the memory limit).
    #[test]
    fn a_confined_worker_can_reach_neither_its_host_nor_files_processes_or_the_network() {
        let output = this_test("confine::tests::confined_child_tries_what_a_worker_must_not")
            .env(PARENT, std::process::id().to_string())
            .output()
            .expect("the child test runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The child's first line follows libtest's `test … ` on the same line.
        if let Some((_, dir)) = stdout
            .lines()
            .find_map(|line| line.split_once("CONFINED: temporary directory "))
        {
            let _ = std::fs::remove_dir_all(dir);
        }
        use std::os::unix::process::ExitStatusExt;
        let report = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        assert!(
            stdout.contains("CONFINED: descriptors [\"0\", \"1\", \"2\", \"3\"]"),
            "only the standard streams and the listing's own: {report}"
        );
        assert!(stdout.contains("CONFINED: dumpable false"), "{report}");
        assert!(stdout.contains("CONFINED: allowed []"), "{report}");
        assert!(stdout.contains("CONFINED: memory still works"), "{report}");
        assert!(
            stdout.contains("CONFINED: the own deadline is armed"),
            "{report}"
        );
        assert_eq!(
            output.status.signal(),
            Some(libc::SIGABRT),
            "the worker dies by its own abort: {report}"
        );
    }

    /// What the kernel would do with one system call, by running `program` on it
    /// as seccomp does (the instructions seccompiler emits).
    fn decide(program: &[seccompiler::sock_filter], arch: u32, nr: i64, args: [u64; 6]) -> u32 {
        // struct seccomp_data: nr, arch, instruction pointer, six arguments.
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as i32).to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        let (mut accumulator, mut pc) = (0u32, 0usize);
        loop {
            let instruction = &program[pc];
            pc += 1;
            let k = instruction.k;
            let jump = |taken: bool| {
                usize::from(if taken {
                    instruction.jt
                } else {
                    instruction.jf
                })
            };
            match instruction.code {
                0x20 => {
                    let at = k as usize;
                    accumulator = u32::from_le_bytes(data[at..at + 4].try_into().expect("4"));
                }
                0x54 => accumulator &= k,
                0x05 => pc += k as usize,
                0x15 => pc += jump(accumulator == k),
                0x25 => pc += jump(accumulator > k),
                0x35 => pc += jump(accumulator >= k),
                0x45 => pc += jump(accumulator & k != 0),
                0x06 => return k,
                code => panic!("an instruction this test does not know: {code:#x}"),
            }
        }
    }

    /// If this fails, the filter lets a worker signal, copy from or trace another
    /// process, start a process or thread, make executable memory or lift its
    /// limits; or it refuses what the worker needs to abort itself and allocate.
    /// The calls std cannot make safely (tgkill to another process, tkill, clone
    /// with fork flags) are checked here, on the filter itself.
    #[test]
    fn the_filter_lets_a_worker_signal_only_itself_and_start_nothing() {
        const ALLOW: u32 = 0x7fff_0000;
        const DENY: u32 = 0x0005_0000 | libc::EPERM as u32;
        const KILL_PROCESS: u32 = 0x8000_0000;
        #[cfg(target_arch = "x86_64")]
        let (arch, other_abi) = (0xc000_003e_u32, 0x4000_0003_u32);
        #[cfg(target_arch = "aarch64")]
        let (arch, other_abi) = (0xc000_00b7_u32, 0x4000_0028_u32);
        let own = 4242_u64;
        let other = 4243_u64;
        let program = filter_program(own as u32).expect("the filter compiles");
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let private_anonymous = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let thread_flags = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD) as u64;
        let cases: Vec<(&str, i64, [u64; 6], u32)> = vec![
            ("read", libc::SYS_read, [0; 6], ALLOW),
            ("write", libc::SYS_write, [1, 0, 0, 0, 0, 0], ALLOW),
            ("ppoll", libc::SYS_ppoll, [0, 1, 0, 0, 0, 0], ALLOW),
            (
                "tgkill itself",
                libc::SYS_tgkill,
                [own, own, libc::SIGABRT as u64, 0, 0, 0],
                ALLOW,
            ),
            ("kill itself", libc::SYS_kill, [own, 6, 0, 0, 0, 0], ALLOW),
            (
                "tgkill another",
                libc::SYS_tgkill,
                [other, other, 9, 0, 0, 0],
                DENY,
            ),
            ("kill another", libc::SYS_kill, [other, 9, 0, 0, 0, 0], DENY),
            ("kill its group", libc::SYS_kill, [0, 9, 0, 0, 0, 0], DENY),
            (
                "kill everyone",
                libc::SYS_kill,
                [u64::MAX, 9, 0, 0, 0, 0],
                DENY,
            ),
            ("tkill", libc::SYS_tkill, [other, 9, 0, 0, 0, 0], DENY),
            (
                "rt_sigqueueinfo",
                libc::SYS_rt_sigqueueinfo,
                [other, 9, 0, 0, 0, 0],
                DENY,
            ),
            (
                "rt_tgsigqueueinfo",
                libc::SYS_rt_tgsigqueueinfo,
                [other, other, 9, 0, 0, 0],
                DENY,
            ),
            (
                "pidfd_open",
                libc::SYS_pidfd_open,
                [other, 0, 0, 0, 0, 0],
                DENY,
            ),
            (
                "pidfd_getfd",
                libc::SYS_pidfd_getfd,
                [3, 5, 0, 0, 0, 0],
                DENY,
            ),
            (
                "pidfd_send_signal",
                libc::SYS_pidfd_send_signal,
                [3, 9, 0, 0, 0, 0],
                DENY,
            ),
            (
                "process_vm_readv",
                libc::SYS_process_vm_readv,
                [other, 0, 1, 0, 1, 0],
                DENY,
            ),
            (
                "process_vm_writev",
                libc::SYS_process_vm_writev,
                [other, 0, 1, 0, 1, 0],
                DENY,
            ),
            ("ptrace", libc::SYS_ptrace, [16, other, 0, 0, 0, 0], DENY),
            (
                "clone a thread",
                libc::SYS_clone,
                [thread_flags, 0, 0, 0, 0, 0],
                DENY,
            ),
            (
                "clone a process",
                libc::SYS_clone,
                [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
                DENY,
            ),
            ("clone3", libc::SYS_clone3, [0, 88, 0, 0, 0, 0], DENY),
            ("mknodat", libc::SYS_mknodat, [0, 0, 0o10600, 0, 0, 0], DENY),
            ("execve", libc::SYS_execve, [0; 6], DENY),
            ("openat", libc::SYS_openat, [0; 6], DENY),
            ("socket", libc::SYS_socket, [2, 1, 0, 0, 0, 0], DENY),
            (
                "prctl",
                libc::SYS_prctl,
                [libc::PR_SET_DUMPABLE as u64, 1, 0, 0, 0, 0],
                DENY,
            ),
            ("seccomp", libc::SYS_seccomp, [1, 0, 0, 0, 0, 0], DENY),
            (
                "anonymous memory",
                libc::SYS_mmap,
                [0, 4096, rw, private_anonymous, u64::MAX, 0],
                ALLOW,
            ),
            (
                "executable memory",
                libc::SYS_mmap,
                [
                    0,
                    4096,
                    rw | libc::PROT_EXEC as u64,
                    private_anonymous,
                    u64::MAX,
                    0,
                ],
                DENY,
            ),
            (
                "a file's memory",
                libc::SYS_mmap,
                [0, 4096, rw, libc::MAP_SHARED as u64, 0, 0],
                DENY,
            ),
            (
                "make memory executable",
                libc::SYS_mprotect,
                [
                    0,
                    4096,
                    libc::PROT_READ as u64 | libc::PROT_EXEC as u64,
                    0,
                    0,
                    0,
                ],
                DENY,
            ),
            (
                "give pages back",
                libc::SYS_madvise,
                [0, 4096, libc::MADV_DONTNEED as u64, 0, 0, 0],
                ALLOW,
            ),
            (
                "poison pages",
                libc::SYS_madvise,
                [0, 4096, libc::MADV_HWPOISON as u64, 0, 0, 0],
                DENY,
            ),
            (
                "its own CPU limit",
                libc::SYS_prlimit64,
                [0, libc::RLIMIT_CPU as u64, 1, 0, 0, 0],
                ALLOW,
            ),
            (
                "its own memory limit",
                libc::SYS_prlimit64,
                [0, libc::RLIMIT_DATA as u64, 1, 0, 0, 0],
                DENY,
            ),
            (
                "another's CPU limit",
                libc::SYS_prlimit64,
                [other, libc::RLIMIT_CPU as u64, 1, 0, 0, 0],
                DENY,
            ),
            ("an x32 read", libc::SYS_read | 0x4000_0000, [0; 6], DENY),
        ];
        let mut wrong = Vec::new();
        for (what, nr, args, expected) in cases {
            let decided = decide(&program, arch, nr, args);
            if decided != expected {
                wrong.push(format!("{what}: {decided:#x}, expected {expected:#x}"));
            }
        }
        let foreign = decide(&program, other_abi, 0, [0; 6]);
        if foreign != KILL_PROCESS {
            wrong.push(format!("another ABI's call: {foreign:#x}, expected a kill"));
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
