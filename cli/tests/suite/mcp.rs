//! MCP servers' tools in scripts, against real servers: `cli/tests/mcp/scripted_server.py`
//! (a stdio server whose tools crash, hang, answer garbage, fail or answer too much,
//! on purpose) and the MCP project's reference server `server-everything` (npm),
//! over stdio and streamable HTTP. `.ci/run` installs the reference server under
//! `~/.cache/codeact-mcp`; where it is missing the tests that need it fail, unless
//! `CODEACT_ALLOW_MISSING_MCP=1` says the install failed (CI then prints why).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeact::tools::ToolDispatch;
use codeact::{McpServer, Tool, ToolBox, ToolError};
use serde_json::{Value, json};

const SCRIPTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/scripted_server.py");

fn scripted() -> McpServer {
    McpServer::stdio("scripted", "python3", [SCRIPTED])
}

async fn toolbox(server: &McpServer) -> Arc<ToolBox> {
    let tools: Vec<Tool> = server.tools().await.expect("the server lists its tools");
    Arc::new(ToolBox::new(tools).expect("valid tool names"))
}

/// A call as a script makes it: from a thread that may block.
async fn call(toolbox: &Arc<ToolBox>, name: &str, args: Value) -> Result<Value, ToolError> {
    let toolbox = Arc::clone(toolbox);
    let name = name.to_string();
    tokio::task::spawn_blocking(move || toolbox.call(&name, args))
        .await
        .expect("the call's thread finishes")
}

/// The reference server's entry point, or `None` (after saying so) when the
/// environment allows it to be missing.
fn everything_server() -> Option<PathBuf> {
    let path = std::env::var_os("CODEACT_TEST_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(
                ".cache/codeact-mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    if path.is_file() {
        return Some(path);
    }
    let allowed = std::env::var("CODEACT_ALLOW_MISSING_MCP").is_ok_and(|v| v == "1");
    assert!(
        allowed,
        "the MCP reference server is not installed at {} (run `.ci/run`'s npm step, or set CODEACT_ALLOW_MISSING_MCP=1 to skip)",
        path.display()
    );
    eprintln!("SKIPPED: no MCP reference server at {}", path.display());
    None
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Waits (at most 20 s) until a server accepts connections on `port`.
async fn wait_until_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the HTTP server did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tools_are_listed_with_their_schemas_under_its_name() {
    let tools = scripted().tools().await.expect("listed");
    let add = tools
        .iter()
        .find(|tool| tool.spec().name == "scripted_add")
        .expect("scripted_add is listed");
    assert_eq!(add.spec().parameters["required"], json!(["a", "b"]));
    assert_eq!(
        add.spec().js_signature(),
        "scripted.add({a: integer, b: integer}) -> {sum: integer}",
        "a method of the server's object; the output schema is the return type"
    );
    assert_eq!(
        add.spec()
            .python_signature(&codeact_runtime::Spelling::JSON),
        "scripted.add(a=integer, b=integer) -> {sum: integer}"
    );
    assert_eq!(
        codeact::Runtime::tool_signature(
            &codeact::RhaiRuntime::new(codeact::Limits::default()),
            add.spec()
        ),
        "scripted.add(#{a: int, b: int}) -> {sum: integer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_reaches_the_script() {
    let tools = toolbox(&scripted()).await;
    assert_eq!(
        call(&tools, "scripted_add", json!({"a": 2, "b": 40})).await,
        Ok(json!({"sum": 42}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_result_is_a_tool_error_with_the_servers_message() {
    let tools = toolbox(&scripted()).await;
    let err = call(&tools, "scripted_fail", json!({}))
        .await
        .expect_err("fails");
    assert_eq!(err.message, "no such repository: octo/none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_against_the_schema_are_refused_before_the_server_sees_them() {
    let tools = toolbox(&scripted()).await;
    let err = call(&tools, "scripted_add", json!({"a": "two", "b": 40}))
        .await
        .expect_err("refused");
    assert!(
        err.message.contains("/a"),
        "names the field: {}",
        err.message
    );
    let err = call(&tools, "scripted_add", json!({"a": 2}))
        .await
        .expect_err("refused");
    assert_eq!(err.message, "missing required `b`; the parameters are a, b");
    let err = call(&tools, "scripted_add", json!({"a": 2, "c": 40}))
        .await
        .expect_err("refused");
    assert_eq!(
        err.message,
        "unknown argument `c`; missing required `b`; the parameters are a, b"
    );
    // None reached the server: this is its first call.
    assert_eq!(
        call(&tools, "scripted_calls", json!({})).await,
        Ok(json!({"calls": 1}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_against_the_output_schema_is_refused() {
    let tools = toolbox(&scripted()).await;
    let err = call(&tools, "scripted_wrong", json!({}))
        .await
        .expect_err("refused");
    assert!(
        err.message
            .contains("MCP server 'scripted' answered wrongly")
            && err.message.contains("/sum"),
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_a_clear_error_and_the_next_call_restarts_it() {
    let tools = toolbox(&scripted()).await;
    call(&tools, "scripted_calls", json!({}))
        .await
        .expect("first call");
    let err = call(&tools, "scripted_crash", json!({}))
        .await
        .expect_err("the server died");
    assert!(
        err.message.contains("MCP server 'scripted'") && err.message.contains("reconnects"),
        "{}",
        err.message
    );
    // A new process: its count starts again.
    assert_eq!(
        call(&tools, "scripted_calls", json!({})).await,
        Ok(json!({"calls": 1}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_is_bounded_by_the_call_timeout_and_replaced() {
    let server = scripted().call_timeout(Duration::from_millis(800));
    let tools = toolbox(&server).await;
    let started = Instant::now();
    let err = call(&tools, "scripted_hang", json!({}))
        .await
        .expect_err("timed out");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        err.message.contains("did not answer within"),
        "{}",
        err.message
    );
    assert_eq!(
        call(&tools, "scripted_calls", json!({})).await,
        Ok(json!({"calls": 1}))
    );
}

/// If this fails, a server that never answers holds a script for the whole
/// call timeout (30 s) past the script's total time limit (its own time does
/// not run while it waits on a tool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_hanging_server_ends_with_the_calling_scripts_total_time_limit() {
    let tools = toolbox(&scripted()).await;
    let runtime = codeact::RhaiRuntime::new(codeact::Limits {
        wall_time: Duration::from_millis(700),
        max_total_time: Duration::from_millis(700),
        ..codeact::Limits::default()
    });
    let mut session = codeact::ScriptSession::start(&runtime, tools.clone()).expect("starts");
    let started = Instant::now();
    let ran = session
        .run("let said = \"answered\"; try { scripted_hang(#{}); } catch (e) { said = `${e}`; } said")
        .await
        .expect("the host stays up");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}: {:?}", ran.output);
    assert_eq!(
        call(&tools, "scripted_calls", json!({})).await,
        Ok(json!({"calls": 1})),
        "the server that hung was replaced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_of_garbage_from_the_server_loses_no_call() {
    let tools = toolbox(&scripted()).await;
    // Whether the client skips the line or drops the connection, the script gets
    // an answer or a clear error, and the next call is served.
    match call(&tools, "scripted_garbage", json!({})).await {
        Ok(value) => assert_eq!(value, json!("answered after garbage")),
        Err(err) => assert!(
            err.message.contains("MCP server 'scripted'"),
            "{}",
            err.message
        ),
    }
    assert!(call(&tools, "scripted_calls", json!({})).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_result_arrives_whole() {
    let tools = toolbox(&scripted()).await;
    let value = call(&tools, "scripted_big", json!({}))
        .await
        .expect("answered");
    assert_eq!(value.as_str().map(str::len), Some(10_000_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_tools_are_listed_and_each_is_callable() {
    let server = McpServer::stdio("many", "python3", [SCRIPTED, "--many", "500"]);
    let tools = toolbox(&server).await;
    assert_eq!(tools.specs().len(), 9 + 500);
    assert_eq!(call(&tools, "many_t499", json!({})).await, Ok(json!(499)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_whose_names_cannot_be_made_identifiers_or_repeat_another_are_left_out() {
    let server = McpServer::stdio("odd", "python3", [SCRIPTED, "--odd-names"]);
    let tools = toolbox(&server).await;
    let odd: Vec<&str> = tools
        .specs()
        .iter()
        .map(|spec| spec.name.as_str())
        .filter(|name| name.starts_with("odd_caf"))
        .collect();
    assert_eq!(
        odd,
        ["odd_caf_"],
        "one of café and caf_, and the agent still starts"
    );
    assert_eq!(tools.specs().len(), 9 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_does_not_outlive_its_tools() {
    let marker = format!("codeact-mcp-marker-{}", std::process::id());
    let server = McpServer::stdio("marked", "python3", [SCRIPTED, "--marker", &marker]);
    let tools = toolbox(&server).await;
    call(&tools, "marked_calls", json!({}))
        .await
        .expect("served");
    let running = || {
        Command::new("pgrep")
            .args(["-f", &marker])
            .stdout(Stdio::null())
            .status()
            .expect("pgrep runs")
            .success()
    };
    assert!(running(), "the server runs while its tools exist");
    drop(tools);
    let deadline = Instant::now() + Duration::from_secs(5);
    while running() {
        assert!(Instant::now() < deadline, "the server outlived its tools");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_an_error_naming_it() {
    let err = McpServer::stdio("ghost", "/nonexistent/mcp-server", Vec::<String>::new())
        .tools()
        .await
        .expect_err("no such program");
    assert!(err.to_string().starts_with("MCP server 'ghost'"), "{err}");
    let err = McpServer::stdio("mute", "python3", ["-c", "import sys; sys.stdin.read()"])
        .connect_timeout(Duration::from_millis(800))
        .tools()
        .await
        .expect_err("never initializes");
    assert!(err.to_string().contains("within"), "{err}");
}

/// The reference server through the command line, from every runtime: its tools
/// are functions there by their flat names and methods of the server's object.
#[test]
fn the_reference_servers_tools_are_called_from_every_runtime() {
    let Some(server) = everything_server() else {
        return;
    };
    let spec = format!("everything=node {}", server.display());
    const RHAI: &str = "let r = everything_get_sum(#{a: 2, b: 40});\nfinal_result([r, everything.get_sum(#{a: 1, b: 1})])";
    const JS: &str = "const r = tools.everything_get_sum({a: 2, b: 40});\nfinal_result([r, everything.get_sum({a: 1, b: 1})])";
    const PYTHON: &str =
        "final_result([everything_get_sum(a=2, b=40), everything.get_sum(a=1, b=1)])";
    let cases = [
        ("rhai", RHAI),
        ("wasm:rhai", RHAI),
        ("js", JS),
        ("js-in-process", JS),
        ("wasm:js", JS),
        ("wasm:boa", JS),
        ("wasm:micropython", PYTHON),
        ("wasm:python", PYTHON),
    ];
    for (runtime, script) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
            .args(["exec", "--runtime", runtime, "--mcp", &spec, "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(script.as_bytes())?;
                child.wait_with_output()
            })
            .expect("codeact runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("The sum of 2 and 40 is 42")
                && stdout.contains("The sum of 1 and 1 is 2"),
            "{runtime}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_answers_over_streamable_http() {
    let Some(server) = everything_server() else {
        return;
    };
    let port = free_port();
    let _node = tokio::process::Command::new("node")
        .arg(&server)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    wait_until_listening(port).await;
    let http = McpServer::http("everything", format!("http://127.0.0.1:{port}/mcp"))
        .header("Authorization", "Bearer not-for-scripts");
    let tools = toolbox(&http).await;
    let sum = call(&tools, "everything_get_sum", json!({"a": 2, "b": 40}))
        .await
        .expect("answered");
    assert!(
        sum.as_str().is_some_and(|text| text.contains("42")),
        "{sum}"
    );
    let image = call(&tools, "everything_get_tiny_image", json!({}))
        .await
        .expect("answered");
    let described = image.as_array().and_then(|blocks| {
        blocks
            .iter()
            .find(|block| block["type"] == "image" && block["mime_type"] == "image/png")
    });
    assert!(described.is_some(), "the image is described: {image}");
}

/// `codeact exec ARGS… -` with `script` on stdin.
fn exec(args: &[&str], script: &str) -> std::process::Output {
    let args: Vec<&str> = ["exec"].iter().chain(args).chain(&["-"]).copied().collect();
    super::cli::codeact(&args, Some(script.as_bytes()))
}

#[test]
fn a_manifest_names_mcp_servers_beside_command_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = dir.path().join("tools.json");
    let text = json!({
        "tools": [{"name": "two", "description": "Two.", "command": ["python3", "-c", "print(2)"]}],
        "mcp": {"scripted": {"command": ["python3", SCRIPTED]}},
    });
    std::fs::write(&manifest, text.to_string()).expect("manifest written");
    let manifest = manifest.to_string_lossy().into_owned();
    let out = exec(
        &["--tools", &manifest],
        "final_result(scripted_add(#{a: two(), b: 40}).sum)",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"type":"final_result","value":42}"#,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_server_that_cannot_start_stops_the_command_with_a_usage_error() {
    for spec in ["bad-name=python3 x", "ghost=/nonexistent/mcp-server"] {
        let out = exec(&["--mcp", spec], "1");
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("MCP server") || stderr.contains("--mcp"),
            "{stderr}"
        );
    }
}

/// Five hundred MCP tools: the prompt lists the two discovery tools and a summary,
/// not the catalog; a script finds a tool by search and calls it by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_catalog_is_found_by_search_from_a_script() {
    use codeact::model::ReplayModel;
    use codeact::{Agent, Limits, Outcome, RhaiRuntime};

    let server = McpServer::stdio("many", "python3", [SCRIPTED, "--many", "500"]);
    let tools = server.tools().await.expect("listed");
    let model = Arc::new(ReplayModel::new([
        "```rhai\nlet found = search_tools(#{query: \"adds a and b\", limit: 3});\nobservation(found)\n```",
        "```rhai\nlet sum = call_tool(found[0].name, #{a: 2, b: 40});\nfinal_result(sum.sum)\n```",
    ]));
    let agent = Agent::builder(model, Arc::new(RhaiRuntime::new(Limits::default())))
        .tools(tools)
        .build()
        .expect("agent builds");
    let prompt = agent.system_prompt();
    assert!(
        prompt.contains("search_tools(#{query: string, limit?: int})"),
        "{prompt}"
    );
    assert!(
        prompt.contains("many.… (509)"),
        "the catalog's summary: {prompt}"
    );
    assert!(
        !prompt.contains("many_t499") && !prompt.contains("many.t499"),
        "the catalog itself is not listed"
    );
    assert!(prompt.len() < 12_000, "{} bytes", prompt.len());
    let run = agent
        .run("What is 2 + 40? Use the tools.")
        .await
        .expect("runs");
    assert_eq!(run.outcome, Outcome::FinalResult { value: json!(42) });
}

/// `codeact mcp` as a server, driven by codeact's own MCP client (rmcp's).
fn codeact_mcp(flags: &[&str]) -> McpServer {
    let mut args = vec!["mcp".to_string()];
    args.extend(flags.iter().map(|flag| flag.to_string()));
    McpServer::stdio("codeact", env!("CARGO_BIN_EXE_codeact"), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_runs_scripts_in_each_runtime_and_keeps_a_sessions_variables() {
    let tools = toolbox(&codeact_mcp(&[])).await;
    let listed = call(&tools, "codeact_list_runtimes", json!({}))
        .await
        .expect("listed");
    let names: Vec<&str> = listed["runtimes"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|runtime| runtime["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "rhai",
            "js",
            "wasm:js",
            "wasm:python",
            "wasm:rhai",
            "wasm:boa"
        ],
        "no opt-in runtime by default"
    );
    for (runtime, define, answer) in [
        ("rhai", "let x = 41;", "final_result(x + 1)"),
        ("js", "var x = 41;", "final_result(x + 1)"),
        ("wasm:js", "var x = 41;", "final_result(x + 1)"),
        ("wasm:python", "x = 41", "final_result(x + 1)"),
        ("wasm:rhai", "let x = 41;", "final_result(x + 1)"),
        ("wasm:boa", "var x = 41;", "final_result(x + 1)"),
    ] {
        let opened = call(&tools, "codeact_new_session", json!({"runtime": runtime}))
            .await
            .expect("a session");
        let session = opened["session"].as_str().expect("an id").to_string();
        call(
            &tools,
            "codeact_run_script",
            json!({"session": session, "code": define}),
        )
        .await
        .expect("ran");
        let ran = call(
            &tools,
            "codeact_run_script",
            json!({"session": session, "code": answer}),
        )
        .await
        .expect("ran");
        assert_eq!(
            ran["output"],
            json!({"type": "final_result", "value": 42}),
            "{runtime}"
        );
        call(&tools, "codeact_close_session", json!({"session": session}))
            .await
            .expect("closed");
    }
    let once = call(
        &tools,
        "codeact_run_script",
        json!({"code": "print(\"hi\"); final_result(1)"}),
    )
    .await
    .expect("ran");
    assert_eq!(once["output"]["value"], 1);
    assert_eq!(once["printed"], "hi\n");
}

/// A `codeact mcp` server's tools run a JavaScript script to its result.
async fn runs_javascript(tools: &Arc<ToolBox>) {
    let ran = call(
        tools,
        "codeact_run_script",
        json!({"runtime": "js", "code": "final_result(6 * 7)"}),
    )
    .await
    .expect("ran");
    assert_eq!(ran["output"], json!({"type": "final_result", "value": 42}));
}

/// A long-running host whose binary is replaced on disk (an upgrade) still
/// starts JavaScript workers of the program it runs: they are started from
/// `/proc/self/exe`, not from a path that now names another file or none.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_workers_start_after_the_hosts_binary_is_deleted_from_disk() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let copy = dir.path().join("codeact-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_codeact"), &copy).expect("copied");
    let server = McpServer::stdio("codeact", copy.to_str().expect("utf-8"), ["mcp"]);
    let tools = toolbox(&server).await;
    std::fs::remove_file(&copy).expect("deleted");
    runs_javascript(&tools).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_holds_its_limits_runtimes_and_session_cap_against_a_client() {
    let tools = toolbox(&codeact_mcp(&[
        "--timeout-ms",
        "300",
        "--max-sessions",
        "1",
        "--idle-timeout",
        "1",
    ]))
    .await;
    // Names the schema does not list are refused by the client's own check (a
    // raw client that sends them along meets the operator's limit: below).
    let err = call(
        &tools,
        "codeact_run_script",
        json!({"code": "loop { }", "limits": {"wall_time_ms": 600000}, "timeout_ms": 600000}),
    )
    .await
    .expect_err("refused");
    assert!(
        err.message
            .starts_with("unknown arguments `limits`, `timeout_ms`"),
        "{}",
        err.message
    );
    // The operator's time limit.
    let started = Instant::now();
    let ran = call(&tools, "codeact_run_script", json!({"code": "loop { }"}))
        .await
        .expect("answered");
    assert_eq!(ran["output"]["type"], "error", "{ran}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // No runtime outside the served list (the schema's enum stops this client;
    // the server's own check is below, from a raw client).
    let err = call(
        &tools,
        "codeact_run_script",
        json!({"runtime": "js-in-process", "code": "1"}),
    )
    .await
    .expect_err("refused");
    assert!(err.message.contains("is not one of"), "{}", err.message);
    // One session at most, and an idle one expires.
    let first = call(&tools, "codeact_new_session", json!({}))
        .await
        .expect("the first");
    let first = first["session"].as_str().expect("an id").to_string();
    assert!(
        first.starts_with("s1-") && first.len() > 10,
        "not guessable: {first}"
    );
    let err = call(&tools, "codeact_new_session", json!({}))
        .await
        .expect_err("past the cap");
    assert!(err.message.contains("close one"), "{}", err.message);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let second = call(&tools, "codeact_new_session", json!({}))
        .await
        .expect("the first expired");
    let err = call(
        &tools,
        "codeact_run_script",
        json!({"session": first, "code": "1"}),
    )
    .await
    .expect_err("expired");
    assert!(err.message.contains("no open session"), "{}", err.message);
    assert!(
        second["session"]
            .as_str()
            .is_some_and(|id| id.starts_with("s2-"))
    );
    let big = "1;".repeat(200_000);
    let err = call(&tools, "codeact_run_script", json!({"code": big}))
        .await
        .expect_err("too long");
    assert!(err.message.contains("bytes"), "{}", err.message);
}

/// A client that ignores the schema: the server itself refuses a runtime outside
/// its list (a guest file's path, the memory-uncapped in-process JavaScript), and
/// holds a script to the operator's time limit whatever limits it sends along.
#[test]
fn codeact_mcp_refuses_a_runtime_outside_its_list_from_a_raw_client() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["mcp", "--timeout-ms", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("codeact mcp starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").expect("written");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    let _initialized = lines.next().expect("a reply").expect("a line");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, runtime) in [
        (1, "wasm:/tmp/evil.wasm"),
        (2, "js-in-process"),
        (3, "wasm:micropython"),
    ] {
        send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run_script", "arguments": {"runtime": runtime, "code": "1"}}}),
        );
        let reply: Value = loop {
            let line = lines.next().expect("a reply").expect("a line");
            let message: Value = serde_json::from_str(&line).expect("JSON");
            if message["id"] == id {
                break message;
            }
        };
        assert_eq!(reply["result"]["isError"], true, "{runtime}: {reply}");
        let text = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("not served here"), "{runtime}: {text}");
    }
    let started = Instant::now();
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "run_script", "arguments": {"code": "loop { }",
        "limits": {"wall_time_ms": 600000}, "timeout_ms": 600000}}}),
    );
    let reply: Value = loop {
        let line = lines.next().expect("a reply").expect("a line");
        let message: Value = serde_json::from_str(&line).expect("JSON");
        if message["id"] == 4 {
            break message;
        }
    };
    assert!(started.elapsed() < Duration::from_secs(5), "{reply}");
    assert!(reply.to_string().contains("error"), "{reply}");
    drop(stdin);
    let _ = child.wait();
}

/// `codeact mcp --listen`: the same tools over streamable HTTP, behind the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_over_http_serves_only_requests_with_its_token() {
    let port = free_port();
    let _server = tokio::process::Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["mcp", "--listen", &format!("127.0.0.1:{port}")])
        .env("CODEACT_MCP_TOKEN", MCP_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("codeact mcp starts");
    wait_until_listening(port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let tools = http_client_tools(&url).await;
    runs_javascript(&tools).await;
    for server in [
        McpServer::http("codeact", &url),
        McpServer::http("codeact", &url).header("Authorization", "Bearer wrong"),
    ] {
        let err = server
            .connect_timeout(Duration::from_secs(5))
            .tools()
            .await
            .expect_err("refused without the token");
        assert!(err.to_string().contains("MCP server 'codeact'"), "{err}");
    }
}

/// The token the `codeact mcp --listen` servers of these tests take.
const MCP_TOKEN: &str = "s3cret-token";

/// `codeact mcp --listen` on a free port with `flags`, behind [`MCP_TOKEN`],
/// serving only Rhai (quick to start); killed when dropped. Its `/mcp` URL.
async fn codeact_mcp_http(flags: &[&str]) -> (tokio::process::Child, String) {
    let port = free_port();
    let server = tokio::process::Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args([
            "mcp",
            "--runtimes",
            "rhai",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(flags)
        .env("CODEACT_MCP_TOKEN", MCP_TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("codeact mcp starts");
    wait_until_listening(port).await;
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

/// A client of the `codeact mcp --listen` at `url`, as codeact's tools reach it.
async fn http_client_tools(url: &str) -> Arc<ToolBox> {
    toolbox(&McpServer::http("codeact", url).header("Authorization", format!("Bearer {MCP_TOKEN}")))
        .await
}

/// One message to a streamable-HTTP MCP server, as a client of protocol
/// 2025-06-18 sends it: the status, the `Mcp-Session-Id` answered, and the
/// JSON-RPC messages of the answer (JSON, or an event stream's data lines).
async fn post_mcp(
    url: &str,
    session: Option<&str>,
    message: Value,
) -> (u16, Option<String>, Vec<Value>) {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(MCP_TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .json(&message);
    if let Some(session) = session {
        request = request
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", "2025-06-18");
    }
    let answered = async {
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|id| id.to_str().ok())
            .map(str::to_string);
        let text = response.text().await.expect("the answer's body");
        let messages = text
            .lines()
            .map(|line| line.strip_prefix("data:").unwrap_or(line).trim())
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter(Value::is_object)
            .collect();
        (status, session, messages)
    };
    tokio::time::timeout(Duration::from_secs(30), answered)
        .await
        .expect("answered within 30 s")
}

/// Opens an MCP session with `initialize`: its id, or the error's message.
async fn initialize(url: &str) -> Result<String, String> {
    let (status, session, messages) = post_mcp(
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    let reply = messages.into_iter().find(|m| m["id"] == 1);
    match reply {
        Some(reply) if reply["result"].is_object() => {
            Ok(session.expect("an open session has an id"))
        }
        Some(reply) => Err(reply["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()),
        None => Err(format!("status {status}, no reply")),
    }
}

/// Whether the server still knows MCP session `id` (a request in it is not 404).
async fn session_is_open(url: &str, id: &str) -> bool {
    let (status, _, _) = post_mcp(
        url,
        Some(id),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
    )
    .await;
    status != 404
}

/// Calls `attempt` every 100 ms until it holds; false if it never did within `limit`.
async fn eventually<F: std::future::Future<Output = bool>>(
    limit: Duration,
    attempt: impl Fn() -> F,
) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if attempt().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// If this fails, clients that send half a request each hold a connection of
/// `codeact mcp --listen` for as long as they like (before the token is looked
/// at), or a real client is not served while they keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_over_http_closes_half_sent_requests_and_serves_a_real_client_past_the_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_server, url) =
        codeact_mcp_http(&["--header-timeout-ms", "1000", "--max-connections", "4"]).await;
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut slow = Vec::new();
    for _ in 0..12 {
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("the server takes connections");
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .expect("half a request sent");
        slow.push(stream);
    }
    // Behind the 12, let go 4 at a time after 1 s each, a real client is served.
    let tools = http_client_tools(&url).await;
    runs_rhai(&tools).await;
    for stream in &mut slow {
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
        assert!(
            closed.is_ok(),
            "a half-sent request is closed after the header timeout"
        );
        assert!(rest.is_empty(), "no answer to half a request");
    }
}

/// A Rhai script through a `codeact mcp` server's tools.
async fn runs_rhai(tools: &Arc<ToolBox>) {
    let ran = call(
        tools,
        "codeact_run_script",
        json!({"runtime": "rhai", "code": "final_result(6 * 7)"}),
    )
    .await
    .expect("ran");
    assert_eq!(ran["output"], json!({"type": "final_result", "value": 42}));
}

/// If this fails, each `initialize` over HTTP keeps an MCP session (memory) for
/// good: clients can pile them up without bound, or a closed one keeps its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_over_http_caps_its_clients_and_a_closed_one_frees_its_place() {
    let (_server, url) = codeact_mcp_http(&["--max-clients", "2"]).await;
    let first = initialize(&url).await.expect("a first client");
    initialize(&url).await.expect("a second client");
    for _ in 0..5 {
        let refusal = initialize(&url).await.expect_err("past the cap");
        assert!(
            refusal.contains("2 clients are connected") && refusal.contains("--max-clients"),
            "{refusal}"
        );
    }
    // A refused client's MCP session is not kept.
    let (_, refused, _) = post_mcp(
        &url,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    if let Some(refused) = refused {
        assert!(
            eventually(Duration::from_secs(10), || async {
                !session_is_open(&url, &refused).await
            })
            .await,
            "a refused session was kept"
        );
    }
    // Closing one frees its place, for one more client only.
    let deleted = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(MCP_TOKEN)
        .header("Mcp-Session-Id", &first)
        .header("MCP-Protocol-Version", "2025-06-18")
        .send()
        .await
        .expect("the server answers");
    assert!(deleted.status().is_success(), "{}", deleted.status());
    assert!(
        eventually(Duration::from_secs(10), || async {
            initialize(&url).await.is_ok()
        })
        .await,
        "the closed session's place was not freed"
    );
    initialize(&url).await.expect_err("full again");
}

/// If this fails, an MCP session nobody uses keeps its place (and memory) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codeact_mcp_over_http_expires_an_idle_client_and_frees_its_place() {
    let (_server, url) = codeact_mcp_http(&[
        "--max-clients",
        "1",
        "--idle-timeout",
        "2",
        "--timeout-ms",
        "300",
        "--total-timeout-ms",
        "300",
    ])
    .await;
    let idle = initialize(&url).await.expect("a client");
    initialize(&url).await.expect_err("past the cap");
    assert!(
        eventually(Duration::from_secs(30), || async {
            initialize(&url).await.is_ok()
        })
        .await,
        "the idle client's place was never freed"
    );
    assert!(
        !session_is_open(&url, &idle).await,
        "the idle session is closed"
    );
}

/// If this fails, one client of `codeact mcp --listen` can run scripts in, or
/// close, a session another client opened, given its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_session_answers_only_the_client_that_opened_it() {
    let (_server, url) = codeact_mcp_http(&[]).await;
    let alice = http_client_tools(&url).await;
    let mallory = http_client_tools(&url).await;
    let opened = call(&alice, "codeact_new_session", json!({}))
        .await
        .expect("a session");
    let session = opened["session"].as_str().expect("an id").to_string();
    call(
        &alice,
        "codeact_run_script",
        json!({"session": session, "code": "let secret = 41;"}),
    )
    .await
    .expect("ran");
    let err = call(
        &mallory,
        "codeact_run_script",
        json!({"session": session, "code": "final_result(secret)"}),
    )
    .await
    .expect_err("not this client's session");
    assert!(err.message.contains("no open session"), "{}", err.message);
    let err = call(
        &mallory,
        "codeact_close_session",
        json!({"session": session}),
    )
    .await
    .expect_err("not this client's to close");
    assert!(err.message.contains("no open session"), "{}", err.message);
    let ran = call(
        &alice,
        "codeact_run_script",
        json!({"session": session, "code": "final_result(secret + 1)"}),
    )
    .await
    .expect("still open for its client");
    assert_eq!(ran["output"], json!({"type": "final_result", "value": 42}));
}

/// If this fails, a client that went away leaves its script sessions open,
/// holding places under `--max-sessions` until they idle out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_script_sessions_close_when_its_mcp_session_does() {
    let (_server, url) = codeact_mcp_http(&["--max-sessions", "1"]).await;
    let leaving = http_client_tools(&url).await;
    let staying = http_client_tools(&url).await;
    call(&leaving, "codeact_new_session", json!({}))
        .await
        .expect("a session");
    let err = call(&staying, "codeact_new_session", json!({}))
        .await
        .expect_err("the one place is taken");
    assert!(err.message.contains("close one"), "{}", err.message);
    // Its last tool dropped, the client deletes its MCP session.
    drop(leaving);
    let staying = &staying;
    assert!(
        eventually(Duration::from_secs(10), || async move {
            call(staying, "codeact_new_session", json!({}))
                .await
                .is_ok()
        })
        .await,
        "the departed client's session kept its place"
    );
}

#[test]
fn codeact_mcp_refuses_to_listen_beyond_loopback_without_a_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_codeact"))
        .args(["mcp", "--listen", "0.0.0.0:0"])
        .env_remove("CODEACT_MCP_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("codeact runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CODEACT_MCP_TOKEN"));
}

/// A team file's agent gets MCP servers from its tools manifest's `mcp` section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_agents_manifest_starts_its_mcp_servers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: String| {
        std::fs::write(dir.path().join(name), text).expect("written");
    };
    write(
        "tools.json",
        json!({"mcp": {"scripted": {"command": ["python3", SCRIPTED]}}}).to_string(),
    );
    write(
        "shop.json",
        json!({"replies": [
            "```rhai\nfinal_result(scripted_price(\"bread\").euros * 2)\n```"
        ]})
        .to_string(),
    );
    write(
        "team.toml",
        "[[agent]]\nname = \"shop\"\nmodel = \"replay:shop.json\"\ntools = \"tools.json\"\n"
            .to_string(),
    );
    let path = dir.path().join("team.toml");
    // Loaded from a thread that may not block, as an async app would.
    let loaded = codeact::agent::load_team(
        &path,
        &codeact::Limits::default(),
        Duration::from_secs(30),
        |builder| builder,
    )
    .expect("the team loads and its MCP server starts");
    let team = loaded.builder.build().expect("the team builds");
    let run = team.run("shop", "Two breads?").await.expect("runs");
    assert_eq!(
        run.outcome,
        codeact::agent::TeamOutcome::Finished {
            agent: "shop".into(),
            outcome: codeact::Outcome::FinalResult { value: json!(4.5) }
        }
    );
}

/// An MCP server's descriptions are a third party's words: the prompt quotes them
/// fenced, the same way in every run (providers cache the prompt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_descriptions_reach_the_prompt_fenced_and_the_same_every_time() {
    use codeact::model::ReplayModel;
    use codeact::{Agent, Limits, RhaiRuntime};

    let mut prompts = Vec::new();
    for _ in 0..2 {
        let tools = scripted().tools().await.expect("listed");
        let agent = Agent::builder(
            Arc::new(ReplayModel::new(["```rhai\nfinal_result(1)\n```"])),
            Arc::new(RhaiRuntime::new(Limits::default())),
        )
        .tools(tools)
        .build()
        .expect("agent builds");
        prompts.push(agent.system_prompt().to_string());
    }
    assert_eq!(prompts[0], prompts[1]);
    let prompt = &prompts[0];
    let at = prompt
        .find("Adds a and b.")
        .expect("the description is shown");
    let before = &prompt[..at];
    let open = before.rfind("<untrusted-").expect("fenced");
    assert!(
        !before[open..].contains("</untrusted-"),
        "the fence around the description is still open"
    );
}

/// A team file's agent gets a policy from its `policy` file: here it refuses an
/// MCP server's tool, and the script catches the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_agents_policy_is_put_to_its_mcp_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: String| {
        std::fs::write(dir.path().join(name), text).expect("written");
    };
    write(
        "tools.json",
        json!({"mcp": {"scripted": {"command": ["python3", SCRIPTED]}}}).to_string(),
    );
    write(
        "policy.rhai",
        r#"fn check_call(tool, args) { if tool == "scripted_price" { return "prices are secret"; } }"#
            .to_string(),
    );
    write(
        "shop.json",
        json!({"replies": [
            "```rhai\nlet said = \"\";\ntry { scripted_price(\"bread\"); } catch (e) { said = e; }\nfinal_result(said)\n```"
        ]})
        .to_string(),
    );
    write(
        "team.toml",
        "[[agent]]\nname = \"shop\"\nmodel = \"replay:shop.json\"\ntools = \"tools.json\"\npolicy = \"policy.rhai\"\n"
            .to_string(),
    );
    let loaded = codeact::agent::load_team(
        &dir.path().join("team.toml"),
        &codeact::Limits::default(),
        Duration::from_secs(30),
        |builder| builder,
    )
    .expect("the team loads");
    let run = loaded
        .builder
        .build()
        .expect("builds")
        .run("shop", "Bread?")
        .await
        .expect("runs");
    let codeact::agent::TeamOutcome::Finished {
        outcome: codeact::Outcome::FinalResult { value },
        ..
    } = run.outcome
    else {
        panic!("{:?}", run.outcome);
    };
    assert!(
        value
            .as_str()
            .is_some_and(|said| said.contains("prices are secret")),
        "{value}"
    );
}

/// If this fails, an MCP server's tools cannot be put behind approvals: a tool
/// named for approval is not marked, or one not named is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tools_named_for_approval_wait_for_it_and_the_others_do_not() {
    let tools = scripted()
        .needs_approval("add")
        .tools()
        .await
        .expect("listed");
    let marked: Vec<&str> = tools
        .iter()
        .filter(|tool| tool.needs_approval())
        .map(|tool| tool.spec().name.as_str())
        .collect();
    assert_eq!(marked, vec!["scripted_add"]);
    let all = scripted()
        .all_need_approval()
        .tools()
        .await
        .expect("listed");
    assert!(all.iter().all(|tool| tool.needs_approval()));
}
