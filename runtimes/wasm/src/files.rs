//! The run's working directory inside the stdio guests: its folders as WASI
//! preopens (Python's `open`, `os.listdir` and `pathlib` just work), and what the
//! guest writes charged to the run's disk limit.
//!
//! wasmtime-wasi resolves every path beneath its preopen (cap-std: neither `..` nor
//! a link leads out) and refuses writes under a read-only one, but counts nothing:
//! a guest could fill the host's disk within one step. So a session with files is
//! linked with the imports that make a file grow or a name appear replaced by
//! checks that charge the [`DiskMeter`] first and then call wasmtime-wasi's own
//! implementation, as its own glue does (the functions `wiggle` generates for
//! each import, on the session's `WasiP1Ctx` and the guest's memory):
//!
//! - `fd_write` and `fd_pwrite` to a file (any descriptor past the three standard
//!   ones): the bytes asked for, and the gap between the file's end and where
//!   the write starts (a write past the end makes the file that much longer,
//!   sparse on the host but not when it is copied out or hashed), refused with
//!   `ENOSPC` when they would pass the limit; what was not written is given
//!   back.
//! - `path_open` with `O_CREAT`, `path_create_directory` and `path_symlink`: one
//!   block ([`ENTRY_COST_BYTES`]) each, whether or not the name was new, so a
//!   script cannot fill the disk with empty files.
//! - `fd_filestat_set_size`: the new size (growing a file by truncation makes it
//!   sparse, but copying it out would not be).
//! - `path_link` is refused: a hard link in a writable folder to a file of a
//!   read-only mount would make that host file writable.
//! - `fd_renumber` (`os.dup2`) is refused: onto a standard descriptor it would make
//!   file writes look like printed output, which is not charged, and it would
//!   hide which descriptors are open.
//!
//! And `path_open` looks first at what the path names, beneath the same folder,
//! with a handle that never blocks (`openat2(O_PATH, RESOLVE_BENEATH)`): a FIFO, a
//! device or a socket (which a mounted host folder might hold; a guest cannot make
//! one) is refused with `ENXIO`, where opening it would block a host thread for
//! good. It also holds a session to [`MAX_OPEN_FILES`] open descriptors: each is a
//! descriptor of the host process, which a guest could otherwise exhaust.
//!
//! Rewriting or deleting a file gives nothing back, as with the host's file
//! helpers. Reads are not metered: the memory limit bounds what a guest holds.

use std::collections::{HashMap, HashSet};

use codeact_runtime::{DiskMeter, FileView};
use wasmtime::{Caller, Linker, ResourceLimiter, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as _;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::exchange::{Phase, SharedExchange, locked};

/// Memory a guest may grow to while it starts, before its first script, on top of
/// the memory limit (MicroPython allocates its heap, sized to the limit, as it
/// starts). After that it may grow by the memory limit beyond what it held when
/// it started.
pub(crate) const STARTUP_MEMORY: usize = 512 << 20;

/// The store's data: WASI, the memory cap, and the exchange with the host.
pub(crate) struct HostState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) memory: MemoryCap,
    pub(crate) exchange: SharedExchange,
    /// The run's files, for a session that has them (this module).
    pub(crate) files: Option<GuestFiles>,
}

impl HostState {
    /// WASI's context, for the linker.
    pub(crate) fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }
}

/// Caps linear memory: generous while the guest starts, then what it started with
/// plus the memory limit. A refused growth is recorded, so a failure that follows is
/// reported as the memory limit.
pub(crate) struct MemoryCap {
    pub(crate) limit: usize,
    pub(crate) baseline: Option<usize>,
    pub(crate) exchange: SharedExchange,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let mut exchange = locked(&self.exchange);
        let running = exchange.phase == Phase::Running;
        if running && self.baseline.is_none() {
            self.baseline = Some(current);
        }
        let cap = match self.baseline {
            Some(baseline) => baseline.saturating_add(self.limit),
            None => STARTUP_MEMORY.saturating_add(self.limit),
        };
        if desired <= cap {
            return Ok(true);
        }
        exchange.memory_refused = true;
        Ok(false)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

const WASI: &str = "wasi_snapshot_preview1";

/// What creating a file, folder or link costs against the disk limit: one block,
/// the host's file helpers' price too.
pub(crate) const ENTRY_COST_BYTES: u64 = 4096;

/// Descriptors a session may hold open at once, files and folders it opened (the
/// preopened folders not counted): 128.
pub(crate) const MAX_OPEN_FILES: usize = 128;

/// The longest path `path_open` takes: 4,096 bytes, Linux's `PATH_MAX`.
const MAX_PATH_BYTES: usize = 4096;

const ERRNO_SUCCESS: i32 = 0;
const ERRNO_FAULT: i32 = 21;
const ERRNO_MFILE: i32 = 33;
const ERRNO_NAMETOOLONG: i32 = 37;
const ERRNO_NOSPC: i32 = 51;
const ERRNO_NOTDIR: i32 = 54;
const ERRNO_NOTSUP: i32 = 58;
const ERRNO_NXIO: i32 = 60;
/// `SYMLINK_FOLLOW` among `path_open`'s lookup flags.
const LOOKUP_SYMLINK_FOLLOW: i32 = 1;
/// `O_CREAT` among `path_open`'s open flags.
const OFLAGS_CREAT: i32 = 1;
/// The descriptors past stdin, stdout and stderr.
const FIRST_FILE_FD: i32 = 3;

/// A session's files, in its store: the meter, and what `path_open` needs to
/// look before it opens.
pub(crate) struct GuestFiles {
    disk: DiskMeter,
    /// A handle of our own (`O_PATH`) on every folder the guest holds a descriptor
    /// of, by that descriptor: the preopens, then what it opened. `path_open`
    /// looks beneath it first; a descriptor not here is no folder.
    dirs: HashMap<i32, Folder>,
    /// The descriptors the guest opened, held to [`MAX_OPEN_FILES`].
    opened: HashSet<i32>,
}

/// Preopens `view`'s folders, read-only or writable as it says.
pub(crate) fn preopen(wasi: &mut WasiCtxBuilder, view: &FileView) -> Result<(), String> {
    for dir in &view.dirs {
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        wasi.preopened_dir(&dir.host, &dir.guest, perms)
            .map_err(|e| format!("cannot open '{}' for the guest: {e:#}", dir.host.display()))?;
    }
    Ok(())
}

/// Puts the meter and a handle on each preopened folder into the store, by the
/// descriptor wasmtime-wasi gives its preopen (3, 4… in the order preopened):
/// `view`'s folders, then `also`, the guest's own read-only folders preopened
/// after them (its standard library).
pub(crate) fn install(
    store: &mut Store<HostState>,
    view: &FileView,
    also: &[&std::path::Path],
) -> Result<(), String> {
    let mut files = GuestFiles {
        disk: view.disk.clone(),
        dirs: HashMap::new(),
        opened: HashSet::new(),
    };
    let hosts = view
        .dirs
        .iter()
        .map(|dir| dir.host.as_path())
        .chain(also.iter().copied());
    for (host, fd) in hosts.zip(FIRST_FILE_FD..) {
        let folder = Folder::open(host)
            .map_err(|e| format!("cannot open '{}' for the guest: {e}", host.display()))?;
        files.dirs.insert(fd, folder);
    }
    store.data_mut().files = Some(files);
    Ok(())
}

/// Calls wasmtime-wasi's own implementation of an import, as the glue wiggle
/// generates for it does: the guest's memory, the session's `WasiP1Ctx`, and the
/// store's allowance of bytes a host call may copy.
macro_rules! wasi {
    ($caller:expr, $func:ident($($arg:expr),* $(,)?)) => {{
        let caller: &mut Caller<'_, HostState> = $caller;
        let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
        let Some(wasmtime::Extern::Memory(memory)) = caller.get_export("memory") else {
            return Err(wasmtime::Error::msg("missing required memory export"));
        };
        let (memory, state) = memory.data_and_store_mut(&mut *caller);
        let ctx = state.wasi();
        ctx.set_hostcall_fuel(fuel);
        let mut memory = wiggle::GuestMemory::Unshared(memory);
        wasmtime_wasi::p1::wasi_snapshot_preview1::$func(ctx, &mut memory, $($arg),*).await?
    }};
}

/// Links the checks over `linker`'s WASI imports (which it must already have).
pub(crate) fn link_checks(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker.func_wrap_async(
        WASI,
        "fd_write",
        |mut caller: Caller<'_, HostState>, (fd, iovs, count, written): (i32, i32, i32, i32)| {
            Box::new(async move {
                let charge = match charge_write(&mut caller, fd, iovs, count, None).await? {
                    Ok(charge) => charge,
                    Err(errno) => return Ok(errno),
                };
                let errno = wasi!(&mut caller, fd_write(fd, iovs, count, written));
                settle_write(&mut caller, charge, errno, written)?;
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "fd_pwrite",
        |mut caller: Caller<'_, HostState>,
         (fd, iovs, count, offset, written): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                let at = u64::try_from(offset).unwrap_or(0);
                let charge = match charge_write(&mut caller, fd, iovs, count, Some(at)).await? {
                    Ok(charge) => charge,
                    Err(errno) => return Ok(errno),
                };
                let errno = wasi!(&mut caller, fd_pwrite(fd, iovs, count, offset, written));
                settle_write(&mut caller, charge, errno, written)?;
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "path_open",
        |mut caller: Caller<'_, HostState>, args: (i32, i32, i32, i32, i32, i64, i64, i32, i32)| {
            Box::new(async move {
                let (dirfd, lookup, path, path_len, oflags, .., opened_at) = args;
                let folder = match look_before_open(&mut caller, dirfd, lookup, path, path_len)? {
                    Ok(folder) => folder,
                    Err(errno) => return Ok(errno),
                };
                let cost = if oflags & OFLAGS_CREAT != 0 {
                    ENTRY_COST_BYTES
                } else {
                    0
                };
                if let Err(errno) = charge(&caller, cost)? {
                    return Ok(errno);
                }
                let (_, _, _, _, _, rights, inheriting, fdflags, _) = args;
                let errno = wasi!(
                    &mut caller,
                    path_open(
                        dirfd, lookup, path, path_len, oflags, rights, inheriting, fdflags,
                        opened_at
                    )
                );
                settle(&caller, cost, errno)?;
                if errno == ERRNO_SUCCESS
                    && let Some(fd) = read_u32(&mut caller, opened_at)
                    && let Ok(fd) = i32::try_from(fd)
                {
                    let files = files_mut(&mut caller)?;
                    files.opened.insert(fd);
                    if let Some(folder) = folder {
                        files.dirs.insert(fd, folder);
                    }
                }
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "fd_close",
        |mut caller: Caller<'_, HostState>, (fd,): (i32,)| {
            Box::new(async move {
                let errno = wasi!(&mut caller, fd_close(fd));
                if errno == ERRNO_SUCCESS {
                    let files = files_mut(&mut caller)?;
                    files.opened.remove(&fd);
                    files.dirs.remove(&fd);
                }
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "path_create_directory",
        |mut caller: Caller<'_, HostState>, (fd, path, path_len): (i32, i32, i32)| {
            Box::new(async move {
                if let Err(errno) = charge(&caller, ENTRY_COST_BYTES)? {
                    return Ok(errno);
                }
                let errno = wasi!(&mut caller, path_create_directory(fd, path, path_len));
                settle(&caller, ENTRY_COST_BYTES, errno)?;
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "path_symlink",
        |mut caller: Caller<'_, HostState>,
         (target, target_len, fd, path, path_len): (i32, i32, i32, i32, i32)| {
            Box::new(async move {
                if let Err(errno) = charge(&caller, ENTRY_COST_BYTES)? {
                    return Ok(errno);
                }
                let errno = wasi!(
                    &mut caller,
                    path_symlink(target, target_len, fd, path, path_len)
                );
                settle(&caller, ENTRY_COST_BYTES, errno)?;
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap_async(
        WASI,
        "fd_filestat_set_size",
        |mut caller: Caller<'_, HostState>, (fd, size): (i32, i64)| {
            Box::new(async move {
                let cost = u64::try_from(size).unwrap_or(0);
                if let Err(errno) = charge(&caller, cost)? {
                    return Ok(errno);
                }
                let errno = wasi!(&mut caller, fd_filestat_set_size(fd, size));
                settle(&caller, cost, errno)?;
                Ok(errno)
            })
        },
    )?;
    linker.func_wrap(
        WASI,
        "path_link",
        |_: i32, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32| -> i32 { ERRNO_NOTSUP },
    )?;
    linker.func_wrap(WASI, "fd_renumber", |_: i32, _: i32| -> i32 {
        ERRNO_NOTSUP
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

fn files<'a>(caller: &'a Caller<'_, HostState>) -> wasmtime::Result<&'a GuestFiles> {
    caller
        .data()
        .files
        .as_ref()
        .ok_or_else(|| wasmtime::Error::msg("the session's files were not installed"))
}

fn files_mut<'a>(caller: &'a mut Caller<'_, HostState>) -> wasmtime::Result<&'a mut GuestFiles> {
    caller
        .data_mut()
        .files
        .as_mut()
        .ok_or_else(|| wasmtime::Error::msg("the session's files were not installed"))
}

/// What `path_open` checks before wasmtime-wasi opens anything: the session is
/// under [`MAX_OPEN_FILES`], `dirfd` is a folder it holds, and the path (beneath
/// that folder, following a last link only if asked) names no FIFO, device or
/// socket. Gives our handle when it names a folder, to keep if the open succeeds.
/// A path that names nothing yet, or that wasmtime-wasi will refuse anyway (out of
/// the folder), passes here and is answered there.
fn look_before_open(
    caller: &mut Caller<'_, HostState>,
    dirfd: i32,
    lookup: i32,
    path: i32,
    path_len: i32,
) -> wasmtime::Result<Result<Option<Folder>, i32>> {
    let Ok(len) = usize::try_from(path_len) else {
        return Ok(Err(ERRNO_FAULT));
    };
    if len > MAX_PATH_BYTES {
        return Ok(Err(ERRNO_NAMETOOLONG));
    }
    let Some(bytes) = read_bytes(caller, path, len) else {
        return Ok(Err(ERRNO_FAULT));
    };
    let files = files(caller)?;
    if files.opened.len() >= MAX_OPEN_FILES {
        return Ok(Err(ERRNO_MFILE));
    }
    let Some(dir) = files.dirs.get(&dirfd) else {
        return Ok(Err(ERRNO_NOTDIR));
    };
    Ok(
        match dir.look(&bytes, lookup & LOOKUP_SYMLINK_FOLLOW != 0) {
            Named::Folder(folder) => Ok(Some(folder)),
            Named::Special => Err(ERRNO_NXIO),
            Named::Other => Ok(None),
        },
    )
}

/// Charges `cost`; `Ok(Err(ENOSPC))` when it would pass the limit.
fn charge(caller: &Caller<'_, HostState>, cost: u64) -> wasmtime::Result<Result<(), i32>> {
    if cost == 0 {
        return Ok(Ok(()));
    }
    Ok(files(caller)?.disk.charge(cost).map_err(|_| ERRNO_NOSPC))
}

/// Gives `cost` back when the call it was charged for failed.
fn settle(caller: &Caller<'_, HostState>, cost: u64, errno: i32) -> wasmtime::Result<()> {
    if errno != ERRNO_SUCCESS {
        files(caller)?.disk.refund(cost);
    }
    Ok(())
}

/// What a write was charged: its bytes and the gap before them.
#[derive(Debug, Clone, Copy, Default)]
struct WriteCharge {
    bytes: u64,
    gap: u64,
}

/// Charges a write to `fd` what its iovecs ask for, and the gap between the
/// file's end and where the write starts (`at`, or the descriptor's offset):
/// nothing for printed output (the standard descriptors); `Ok(Err(errno))` when
/// the array lies outside memory or the bytes would pass the limit.
async fn charge_write(
    caller: &mut Caller<'_, HostState>,
    fd: i32,
    iovs: i32,
    count: i32,
    at: Option<u64>,
) -> wasmtime::Result<Result<WriteCharge, i32>> {
    if fd < FIRST_FILE_FD {
        return Ok(Ok(WriteCharge::default()));
    }
    let Some(bytes) = iovec_bytes(caller, iovs, count) else {
        return Ok(Err(ERRNO_FAULT));
    };
    let gap = if bytes == 0 {
        0
    } else {
        gap_before(caller, fd, at).await?
    };
    let charged = WriteCharge { bytes, gap };
    Ok(charge(caller, bytes.saturating_add(gap))?.map(|()| charged))
}

/// How far past the end of `fd`'s file a write at `at` (the descriptor's own
/// offset when `None`; the end for a descriptor opened to append) would start:
/// 0 when it starts within the file, or `fd` is no regular file.
async fn gap_before(
    caller: &mut Caller<'_, HostState>,
    fd: i32,
    at: Option<u64>,
) -> wasmtime::Result<u64> {
    use wasmtime_wasi::p1::types;

    let Some(wasmtime::Extern::Memory(memory)) = caller.get_export("memory") else {
        return Err(wasmtime::Error::msg("missing required memory export"));
    };
    let (memory, state) = memory.data_and_store_mut(&mut *caller);
    let ctx = state.wasi();
    let mut memory = wiggle::GuestMemory::Unshared(memory);
    let Ok(fd) = u32::try_from(fd) else {
        return Ok(0);
    };
    let fd = types::Fd::from(fd);
    let Ok(stat) = ctx.fd_filestat_get(&mut memory, fd).await else {
        return Ok(0);
    };
    if stat.filetype != types::Filetype::RegularFile {
        return Ok(0);
    }
    let start = match at {
        Some(at) => at,
        None => {
            let Ok(fdstat) = ctx.fd_fdstat_get(&mut memory, fd).await else {
                return Ok(0);
            };
            if fdstat.fs_flags.contains(types::Fdflags::APPEND) {
                return Ok(0);
            }
            ctx.fd_tell(&mut memory, fd).unwrap_or(0)
        }
    };
    Ok(start.saturating_sub(stat.size))
}

/// Gives back what a charged write did not write: all of it when it wrote
/// nothing (no gap was made), else the bytes it left out.
fn settle_write(
    caller: &mut Caller<'_, HostState>,
    charged: WriteCharge,
    errno: i32,
    written: i32,
) -> wasmtime::Result<()> {
    if charged.bytes == 0 && charged.gap == 0 {
        return Ok(());
    }
    let done = if errno == ERRNO_SUCCESS {
        read_u32(caller, written).map_or(0, u64::from)
    } else {
        0
    };
    let refund = if done == 0 {
        charged.bytes.saturating_add(charged.gap)
    } else {
        charged.bytes.saturating_sub(done)
    };
    files(caller)?.disk.refund(refund);
    Ok(())
}

/// The bytes an iovec array asks to write, or `None` when it lies outside memory.
fn iovec_bytes(caller: &mut Caller<'_, HostState>, iovs: i32, count: i32) -> Option<u64> {
    let memory = caller.get_export("memory")?.into_memory()?;
    let data = memory.data(&*caller);
    let start = usize::try_from(iovs).ok()?;
    let len = usize::try_from(count).ok()?.checked_mul(8)?;
    let array = data.get(start..start.checked_add(len)?)?;
    Some(
        array
            .chunks_exact(8)
            .map(|iovec| u64::from(u32::from_le_bytes([iovec[4], iovec[5], iovec[6], iovec[7]])))
            .sum(),
    )
}

fn read_u32(caller: &mut Caller<'_, HostState>, at: i32) -> Option<u32> {
    let bytes = read_bytes(caller, at, 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn read_bytes(caller: &mut Caller<'_, HostState>, at: i32, len: usize) -> Option<Vec<u8>> {
    let memory = caller.get_export("memory")?.into_memory()?;
    let data = memory.data(&*caller);
    let start = usize::try_from(at).ok()?;
    data.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
}

/// What a path names, as far as `path_open` cares.
enum Named {
    /// A folder, with our handle on it.
    Folder(Folder),
    /// A FIFO, a device or a socket.
    Special,
    /// A regular file, a link not followed, nothing yet, or a path that does not
    /// resolve beneath the folder: wasmtime-wasi answers.
    Other,
}

/// Our handle on a folder the guest holds: `O_PATH`, so it reads nothing and never
/// blocks.
#[cfg(target_os = "linux")]
struct Folder(std::os::fd::OwnedFd);

#[cfg(target_os = "linux")]
impl Folder {
    fn open(host: &std::path::Path) -> std::io::Result<Self> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            host,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self(fd))
    }

    /// What `path` names beneath this folder, resolved by the kernel
    /// (`RESOLVE_BENEATH`: `..` and links cannot lead out).
    fn look(&self, path: &[u8], follow: bool) -> Named {
        use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
        let path = if path.is_empty() {
            b".".as_slice()
        } else {
            path
        };
        let Ok(path) = std::ffi::CString::new(path) else {
            return Named::Other;
        };
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let Ok(fd) = rustix::fs::openat2(&self.0, path.as_c_str(), flags, Mode::empty(), resolve)
        else {
            return Named::Other;
        };
        match rustix::fs::fstat(&fd).map(|stat| FileType::from_raw_mode(stat.st_mode)) {
            Ok(FileType::Directory) => Named::Folder(Self(fd)),
            Ok(FileType::Fifo | FileType::CharacterDevice | FileType::BlockDevice)
            | Ok(FileType::Socket) => Named::Special,
            _ => Named::Other,
        }
    }
}

/// Elsewhere than Linux there is no `openat2`: folders are only counted, and what a
/// path names is left to wasmtime-wasi.
#[cfg(not(target_os = "linux"))]
struct Folder;

#[cfg(not(target_os = "linux"))]
impl Folder {
    fn open(_host: &std::path::Path) -> std::io::Result<Self> {
        Ok(Self)
    }

    fn look(&self, _path: &[u8], _follow: bool) -> Named {
        Named::Other
    }
}
