//! Attacks on the surfaces the service, MCP both ways, approvals, `fetch` and
//! snapshots added: a marked tool run unapproved through `exec` or `mcp`, a
//! schema costing exponential time, part of a secret echoed back, a snapshot
//! that raises its own memory cap, names from a server that spell a prelude's
//! placeholder or no identifier at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::exec::Snapshot;
use codeact::output::Check;
use codeact::tools::{HostPattern, IpNetwork, NoTools, SecretHeader, ToolDispatch, ToolSpec};
use codeact::{
    FetchPolicy, Limits, McpServer, OutputSpec, Runtime, ScriptOutput, ScriptSession, ToolBox,
    ToolError, WasmRuntime, fetch_tool,
};
use serde_json::{Map, Value, json};

use super::attack::Attack;
use super::host::{host_only, runtime};
use crate::approvals::{PAY_AND_SAY, pay_needing_approval};

/// The attacks, each in the columns it applies to.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "a_tool_that_needs_approval_never_runs_unapproved_through_exec_or_mcp",
        run: unapproved_calls,
    },
    Attack {
        name: "a_schema_costing_exponential_time_is_refused_or_stopped_at_its_budget",
        run: costly_schemas,
    },
    Attack {
        name: "part_of_a_secret_or_its_encodings_echoed_by_a_server_never_reaches_the_script",
        run: echoed_secret,
    },
    Attack {
        name: "an_mcp_servers_odd_tool_names_neither_stop_the_agent_nor_reach_code",
        run: odd_names,
    },
    Attack {
        name: "a_snapshot_whose_baseline_was_raised_does_not_lift_the_memory_cap",
        run: forged_baseline,
    },
];

fn unapproved_calls(column: &str) -> Option<Result<String, String>> {
    host_only(column, || {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (manifest, paid) = pay_needing_approval(dir.path());
        let manifest = manifest.to_string_lossy().into_owned();
        let out = crate::cli::codeact(
            &["exec", "--tools", &manifest, "-"],
            Some(PAY_AND_SAY.as_bytes()),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if paid.exists() || !stdout.contains("approval was denied") {
            return Err(format!("codeact exec: {stdout}"));
        }
        let server = McpServer::stdio(
            "codeact",
            env!("CARGO_BIN_EXE_codeact"),
            ["mcp", "--runtimes", "rhai", "--tools", &manifest],
        );
        let answer = runtime()?.block_on(async {
            let tools = server.tools().await.map_err(|e| e.to_string())?;
            let toolbox = Arc::new(ToolBox::new(tools).map_err(|e| e.to_string())?);
            tokio::task::spawn_blocking(move || {
                toolbox.call(
                    "codeact_run_script",
                    json!({"runtime": "rhai", "code": PAY_AND_SAY}),
                )
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.message)
        })?;
        if paid.exists() || !answer.to_string().contains("approval was denied") {
            return Err(format!("codeact mcp: {answer}"));
        }
        Ok("`pay` marked for approval, called from `codeact exec` and from an MCP client of `codeact mcp`: denied (a catchable tool error), never run".into())
    })
}

/// Forty definitions each naming the next twice under `anyOf`.
fn doubling_schema(levels: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..levels {
        let next = json!({"$ref": format!("#/$defs/a{}", i + 1)});
        let last = json!({"type": "string"});
        let branch = if i + 1 == levels { last } else { next };
        defs.insert(format!("a{i}"), json!({"anyOf": [branch.clone(), branch]}));
    }
    json!({"$defs": Value::Object(defs), "$ref": "#/$defs/a0"})
}

fn costly_schemas(column: &str) -> Option<Result<String, String>> {
    host_only(column, || {
        let spec = |schema: Value| OutputSpec {
            schema: Some(schema),
            ..OutputSpec::default()
        };
        match spec(doubling_schema(40)).load() {
            Err(e) if e.to_string().contains("expand to more than") => {}
            other => return Err(format!("the doubling schema was not refused: {other:?}")),
        }
        let recursive = json!({
            "$defs": {"node": {"anyOf": [
                {"type": "array", "items": {"$ref": "#/$defs/node"}},
                {"type": "array", "items": {"$ref": "#/$defs/node"}},
            ]}},
            "$ref": "#/$defs/node"
        });
        let contract = spec(recursive).load().map_err(|e| e.to_string())?;
        let mut value = json!(1);
        for _ in 0..40 {
            value = json!([value]);
        }
        let started = Instant::now();
        let check = contract.check(&value);
        let took = started.elapsed();
        match check {
            Check::Refused { reason, .. }
                if reason.contains("could not be checked") && took < Duration::from_secs(5) => {}
            other => return Err(format!("after {took:?}: {other:?}")),
        }
        Ok("40 `$defs` doubling through `anyOf` (2.9 KB): refused when loaded; a recursive schema under 2 branches against a value nested 40 deep: refused within its budget (1,000,000 references or 1 s), not 2^40 steps".into())
    })
}

fn echoed_secret(column: &str) -> Option<Result<String, String>> {
    host_only(column, || {
        use base64::Engine as _;

        const SECRET: &str = "tok-3f9a61c0e2b74d58";
        runtime()?.block_on(async {
            let app = axum::Router::new().route(
                "/echo",
                axum::routing::get(|headers: axum::http::HeaderMap| async move {
                    let token = headers
                        .get("x-api-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let encoded = base64::engine::general_purpose::STANDARD.encode(&token);
                    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
                    format!(
                        "token {}… is expired; as base64 {encoded}; as hex {hex}; tail …{}",
                        &token[..10],
                        &token[8..]
                    )
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let address = listener.local_addr().map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            let policy = FetchPolicy::new()
                .allow_host(HostPattern::parse("localhost").map_err(|e| e.to_string())?)
                .allow_private_network(IpNetwork::parse("127.0.0.0/8").map_err(|e| e.to_string())?)
                .header(
                    SecretHeader::new(
                        HostPattern::parse("localhost").map_err(|e| e.to_string())?,
                        "x-api-key",
                        SECRET,
                    )
                    .map_err(|e| e.to_string())?,
                );
            let url = format!("http://localhost:{}/echo", address.port());
            let answer = fetch_tool(policy)
                .call(json!({ "url": url }))
                .await
                .map_err(|e: ToolError| e.message)?;
            let shown = answer.to_string();
            let leaked: Vec<&str> = (0..=SECRET.len() - 8)
                .map(|at| &SECRET[at..at + 8])
                .filter(|run| shown.contains(run))
                .collect();
            if !leaked.is_empty() || !shown.contains("[redacted]") {
                return Err(format!("leaked {leaked:?}: {shown}"));
            }
            Ok("a server quoting the first 10 and the last 12 characters of a secret header and echoing it in base64 and hex: every run of 8 bytes of it redacted".into())
        })
    })
}

fn odd_names(column: &str) -> Option<Result<String, String>> {
    host_only(column, || {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/scripted_server.py");
        let server = McpServer::stdio("odd", "python3", [script, "--odd-names"]);
        let tools = runtime()?
            .block_on(server.tools())
            .map_err(|e| e.to_string())?;
        let toolbox = ToolBox::new(tools).map_err(|e| format!("the agent cannot start: {e}"))?;
        let odd = toolbox
            .specs()
            .iter()
            .filter(|spec| spec.name.starts_with("odd_caf"))
            .count();
        if odd != 1 {
            return Err(format!("{odd} tools named like café"));
        }
        // A parameter named like a placeholder of the Python prelude: the
        // session starts and runs.
        let placeholder = ToolSpec::new("convert", "").with_parameters(json!({
            "type": "object",
            "properties": {"x__CODEACT_NAMESPACES__": {"type": "string"},
                           "y__CODEACT_ENCODER__": {"type": "string"}}
        }));
        let runtime =
            WasmRuntime::by_name("wasm:python", Limits::default()).map_err(|e| e.to_string())?;
        let tools: Arc<dyn ToolDispatch> = Arc::new(Specs(vec![placeholder]));
        let mut session =
            ScriptSession::start(&runtime, tools).map_err(|e| format!("no Python session: {e}"))?;
        let ran = session
            .run_blocking("final_result(1)")
            .map_err(|e| e.to_string())?;
        if !matches!(ran.output, ScriptOutput::FinalResult { .. }) {
            return Err(format!("{}", ran.output));
        }
        Ok("tools named `café`, `caf_` and ``: one kept, the rest left out with a warning, the agent starts; parameters named `x__CODEACT_NAMESPACES__` and `y__CODEACT_ENCODER__`: the Python guest starts and runs".into())
    })
}

/// Tools that are only specs: their calls fail.
struct Specs(Vec<ToolSpec>);

impl ToolDispatch for Specs {
    fn specs(&self) -> &[ToolSpec] {
        &self.0
    }

    fn call(&self, name: &str, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::new(format!("'{name}' is only a spec here")))
    }
}

fn forged_baseline(column: &str) -> Option<Result<String, String>> {
    if column != "wasm:boa" {
        return None;
    }
    Some((|| {
        let limits = Limits {
            max_memory_bytes: 8 << 20,
            ..Limits::default()
        };
        let boa = WasmRuntime::by_name("wasm:boa", limits).map_err(|e| e.to_string())?;
        let mut session = boa
            .new_session(Arc::new(NoTools))
            .map_err(|e| e.to_string())?;
        session.run("var n = 1; 0").map_err(|e| e.to_string())?;
        let snapshot = session.snapshot().map_err(|e| e.to_string())?;
        let forged = forge_baseline(&snapshot, 450 << 20)?;
        match boa.restore(&forged, Arc::new(NoTools)) {
            Err(e) if e.to_string().contains("more than a guest may start with") => {}
            Err(e) => return Err(format!("refused, but for another reason: {e}")),
            Ok(_) => return Err("restored with a 450 MB baseline under an 8 MB limit".into()),
        }
        Ok("a snapshot's baseline raised to 450 MB and the checksum recomputed, restored under an 8 MiB limit: refused; the cap comes from the restoring runtime".into())
    })())
}

/// `snapshot` with its guest state's `baseline` replaced and sealed again, as
/// anyone who can write the file can (the seal is a checksum).
fn forge_baseline(snapshot: &Snapshot, baseline: u64) -> Result<Snapshot, String> {
    let bytes = snapshot.as_bytes();
    let number = |at: usize, len: usize| -> Result<usize, String> {
        let slice = bytes.get(at..at + len).ok_or("the snapshot is short")?;
        let mut buf = [0u8; 8];
        buf[..len].copy_from_slice(slice);
        Ok(u64::from_le_bytes(buf) as usize)
    };
    let mut at = b"CODEACT-SNAPSHOT\n".len() + 4;
    let mut texts = Vec::new();
    for _ in 0..3 {
        let len = number(at, 4)?;
        let text = bytes
            .get(at + 4..at + 4 + len)
            .ok_or("the snapshot is short")?;
        texts.push(String::from_utf8_lossy(text).into_owned());
        at += 4 + len;
    }
    let payload_len = number(at, 8)?;
    let payload = bytes
        .get(at + 8..at + 8 + payload_len)
        .ok_or("the snapshot is short")?;
    let header_len = u64::from_le_bytes(payload[..8].try_into().map_err(|_| "short")?) as usize;
    let mut header: Value =
        serde_json::from_slice(&payload[8..8 + header_len]).map_err(|e| e.to_string())?;
    header["baseline"] = json!(baseline);
    let header = header.to_string();
    let mut forged = (header.len() as u64).to_le_bytes().to_vec();
    forged.extend_from_slice(header.as_bytes());
    forged.extend_from_slice(&payload[8 + header_len..]);
    Ok(Snapshot::seal(&texts[0], &texts[1], &forged))
}
