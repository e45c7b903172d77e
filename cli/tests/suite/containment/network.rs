//! The network a script gets when the host allows one (issue 18): the `fetch` tool
//! and its rules, tried from every runtime as an attacker would: a host off the
//! list, an allowed name that resolves to a loopback address, a redirect that leaves
//! the list, and a secret header echoed back by the server.

use std::sync::Arc;

use codeact::tools::{HostPattern, IpNetwork, SecretHeader};
use codeact::{FetchPolicy, Limits, ScriptOutput, ScriptSession, ToolBox, fetch_tool};
use serde_json::{Value, json};

use super::attack::Attack;

/// The network attacks.
pub const ATTACKS: &[Attack] = &[Attack {
    name: "fetch_reaches_only_what_the_host_allowed",
    run: fetch_rules,
}];

/// Serves `/json`, `/echo` (request headers as JSON) and `/away` (a redirect to a
/// host off the list) on 127.0.0.1 until the process ends; returns the port.
fn serve() -> u16 {
    use axum::Router;
    use axum::http::HeaderMap;
    use axum::response::Redirect;
    use axum::routing::get;

    let (sender, port) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let app = Router::new()
                .route("/json", get(|| async { axum::Json(json!({"ok": true})) }))
                .route(
                    "/echo",
                    get(|headers: HeaderMap| async move {
                        let seen: serde_json::Map<String, Value> = headers
                            .iter()
                            .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or_default())))
                            .collect();
                        axum::Json(Value::Object(seen))
                    }),
                )
                .route(
                    "/away",
                    get(|| async { Redirect::temporary("http://elsewhere.invalid/") }),
                );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a port");
            let _ = sender.send(listener.local_addr().expect("bound").port());
            let _ = axum::serve(listener, app).await;
        });
    });
    port.recv().expect("the server started")
}

const SECRET: &str = "tok-5ecret-9f8e7d";

/// Each request and what the script must get: `ok` (an answer) or a refusal
/// containing the text, under a policy allowing `localhost` and its address.
fn cases(port: u16) -> Vec<(String, &'static str)> {
    vec![
        (format!("http://localhost:{port}/json"), "ok"),
        (
            "http://example.org/".into(),
            "is not among the allowed hosts",
        ),
        (
            format!("http://127.0.0.1:{port}/json"),
            "is not among the allowed hosts",
        ),
        (
            format!("http://localhost:{port}/away"),
            "elsewhere.invalid is not among the allowed hosts",
        ),
        (format!("http://localhost:{port}/echo"), "ok"),
    ]
}

fn script(column: &str, urls: &[String]) -> Option<String> {
    let list = serde_json::to_string(urls).expect("json");
    Some(match column {
        "rhai" | "wasm:rhai" => format!(
            "let out = [];\nfor u in {list} {{ try {{ out.push(fetch(#{{url: u}}).text); }} catch (e) {{ out.push(`refused: ${{e}}`); }} }}\nfinal_result(out)"
        ),
        "js" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => format!(
            "const out = [];\nfor (const u of {list}) {{ try {{ out.push(tools.fetch({{url: u}}).text); }} catch (e) {{ out.push('refused: ' + String(e)); }} }}\nfinal_result(out)"
        ),
        "wasm:python" | "wasm:micropython" => format!(
            "out = []\nfor u in {list}:\n    try:\n        out.append(fetch(u)['text'])\n    except Exception as e:\n        out.append('refused: ' + str(e))\nfinal_result(out)"
        ),
        _ => return None,
    })
}

fn fetch_rules(column: &str) -> Option<Result<String, String>> {
    let port = serve();
    let cases = cases(port);
    let urls: Vec<String> = cases.iter().map(|(url, _)| url.clone()).collect();
    let script = script(column, &urls)?;
    let localhost = || HostPattern::parse("localhost").expect("valid");
    let named_only = FetchPolicy::new()
        .allow_host(localhost())
        .header(SecretHeader::new(localhost(), "x-api-key", SECRET).expect("valid"));
    let with_address = named_only
        .clone()
        .allow_private_network(IpNetwork::parse("127.0.0.1").expect("valid"));
    let inward = vec![(
        format!("http://localhost:{port}/json"),
        "not a public address",
    )];
    let inward_script = script_for(column, &inward)?;
    Some(
        run(column, with_address, &script)
            .and_then(|output| judge(&cases, output))
            .and_then(|_| run(column, named_only, &inward_script))
            .and_then(|output| judge(&inward, output))
            .map(|_| {
                "a host off the list, an IP literal off the list, a redirect off the list, and an allowed name resolving to a loopback address whose network was not allowed: refused; the secret header sent and blanked in the echo".into()
            }),
    )
}

fn script_for(column: &str, cases: &[(String, &'static str)]) -> Option<String> {
    let urls: Vec<String> = cases.iter().map(|(url, _)| url.clone()).collect();
    script(column, &urls)
}

fn run(column: &str, policy: FetchPolicy, script: &str) -> Result<ScriptOutput, String> {
    let runtime = crate::support::runtimes::runtime(column, Limits::default())?;
    let tools = Arc::new(ToolBox::new([fetch_tool(policy)]).map_err(|e| e.to_string())?);
    let mut session = ScriptSession::start(&*runtime, tools).map_err(|e| e.to_string())?;
    Ok(session
        .run_blocking(script)
        .map_err(|e| format!("host failed: {e}"))?
        .output)
}

fn judge(cases: &[(String, &'static str)], output: ScriptOutput) -> Result<String, String> {
    let ScriptOutput::FinalResult { value, .. } = &output else {
        return Err(format!("the script did not finish: {output}"));
    };
    let got = value.as_array().ok_or("not a list")?;
    if value.to_string().contains(SECRET) {
        return Err("the secret header reached the script".into());
    }
    for ((url, want), got) in cases.iter().zip(got) {
        let got = got.as_str().unwrap_or_default();
        let fine = if *want == "ok" {
            !got.starts_with("refused")
        } else {
            got.starts_with("refused") && got.contains(want)
        };
        if !fine {
            return Err(format!("{url}: wanted {want}, got {got}"));
        }
    }
    Ok(String::new())
}
