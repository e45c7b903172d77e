//! A throwaway PostgreSQL cluster for tests and the load example: `initdb` into
//! a temporary folder (as `postgres`, else `nobody`, when running as root, which
//! initdb refuses), `pg_ctl start` on a free port on 127.0.0.1 with its socket in
//! that folder, and a watchdog that stops the cluster and removes the folder
//! once the process that started it exits.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A PostgreSQL cluster for this test process, stopped (and its folder removed)
/// by a watchdog once the process exits.
pub struct Cluster {
    pub port: u16,
}

impl Cluster {
    /// Creates the database `name` (a name the test chose: it is not quoted)
    /// on the cluster; its URL.
    pub async fn create_database(&self, name: &str) -> String {
        let admin = format!("postgres://codeact@127.0.0.1:{}/postgres", self.port);
        let pool = sqlx::PgPool::connect(&admin)
            .await
            .expect("the cluster answers");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&pool)
            .await
            .expect("a database");
        pool.close().await;
        format!("postgres://codeact@127.0.0.1:{}/{name}", self.port)
    }
}

/// The folder holding `initdb` and `pg_ctl`: `$CODEACT_PG_BIN`, the `PATH`, or
/// Debian's `/usr/lib/postgresql/*/bin` (newest first).
pub fn pg_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CODEACT_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn uid() -> u32 {
    let out = Command::new("id").arg("-u").output().expect("id runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a uid")
}

/// `(uid, gid)` of `user`, if the system has it.
fn ids_of(user: &str) -> Option<(u32, u32)> {
    let read = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    Some((read("-u")?, read("-g")?))
}

pub fn start_cluster() -> Result<Cluster, String> {
    let bin = pg_bin()
        .ok_or("no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin")?;
    let dir = tempfile::Builder::new()
        .prefix("codeact-pg-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    // initdb refuses to run as root: the cluster then belongs to `postgres`
    // (Debian's package creates it), else `nobody`, run through `runuser`.
    let run_as = if uid() == 0 {
        let user = ["postgres", "nobody"]
            .into_iter()
            .find_map(|u| ids_of(u).map(|ids| (u, ids)))
            .ok_or("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL")?;
        std::os::unix::fs::chown(&dir, Some(user.1.0), Some(user.1.1))
            .map_err(|e| e.to_string())?;
        Some(user.0)
    } else {
        None
    };
    let command = |program: &str| -> Command {
        let path = bin.join(program);
        match run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    };
    let data = dir.join("data");
    let out = command("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", "codeact", "--auth=trust", "-E", "UTF8", "--no-sync"])
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port();
    let out = command("pg_ctl")
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("log"))
        .arg("-o")
        .arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off",
            dir.display()
        ))
        .args(["-w", "start"])
        .output()
        .map_err(|e| format!("pg_ctl: {e}"))?;
    if !out.status.success() {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        return Err(format!(
            "pg_ctl start failed: {}{log}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The watchdog: once this test process is gone, stop the cluster and remove it.
    let stop = match run_as {
        Some(user) => format!(
            "runuser -u {user} -- {} -D {} -m immediate stop",
            bin.join("pg_ctl").display(),
            data.display()
        ),
        None => format!(
            "{} -D {} -m immediate stop",
            bin.join("pg_ctl").display(),
            data.display()
        ),
    };
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 {} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {}",
            std::process::id(),
            dir.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("the watchdog: {e}"))?;
    Ok(Cluster { port })
}
