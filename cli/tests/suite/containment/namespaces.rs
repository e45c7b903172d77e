//! Namespace objects (an MCP server's tools as `github.create_issue(…)`) are the
//! host's: a script that rebinds one, changes its methods, or calls the prelude's
//! hook that defines them changes nothing for the session's next script.

use std::sync::Arc;

use codeact::{Limits, ScriptOutput, ScriptSession, Tool, ToolBox};
use serde_json::json;

use super::attack::Attack;
use crate::support;

/// The attacks on namespace objects.
pub const ATTACKS: &[Attack] = &[Attack {
    name: "a_tool_namespace_changed_by_one_script_is_the_hosts_again_in_the_next",
    run: a_tool_namespace_changed_by_one_script_is_the_hosts_again_in_the_next,
}];

/// `calc_add`, also `calc.add`.
fn tools() -> Arc<ToolBox> {
    let add = Tool::from_fn("calc_add", "Adds a and b.", |args| {
        Ok(json!(
            args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
        ))
    })
    .in_namespace("calc");
    Arc::new(ToolBox::new([add]).expect("valid tools"))
}

const JS_ATTACK: &str = r#"
try { calc.add = () => "pwned"; } catch (e) {}
try { Object.defineProperty(calc, "add", { value: () => "pwned" }); } catch (e) {}
try { Object.setPrototypeOf(calc, { add: () => "pwned" }); } catch (e) {}
try { __codeact_namespaces('{"final_result": {"add": "calc_add"}, "evil": {"add": "calc_add"}}'); } catch (e) {}
calc = { add: () => "pwned" };
observation(calc.add({ a: 1, b: 2 }))
"#;

const PYTHON_ATTACK: &str = r#"
def pwned(**kwargs):
    return "pwned"
for attempt in (
    lambda: setattr(calc, "add", pwned),
    lambda: setattr(type(calc), "add", staticmethod(pwned)),
    lambda: object.__setattr__(calc, "add", pwned),
):
    try:
        attempt()
    except Exception:
        pass
observation(calc.add(a=1, b=2))
"#;

fn a_tool_namespace_changed_by_one_script_is_the_hosts_again_in_the_next(
    column: &str,
) -> Option<Result<String, String>> {
    let (attacks, check, expected): (&[&str], &str, _) = match column {
        "js" | "wasm:js" | "wasm:js-stdio" | "wasm:boa" => (
            &[JS_ATTACK],
            "final_result([calc.add({ a: 1, b: 2 }), typeof evil])",
            json!([3, "undefined"]),
        ),
        "wasm:micropython" | "wasm:python" => (
            &[PYTHON_ATTACK, "calc = None\nobservation(1)"],
            "final_result(calc.add(a=1, b=2))",
            json!(3),
        ),
        "rhai" | "wasm:rhai" => (
            &[
                "calc.add = Fn(\"evil\"); observation(1)",
                "calc.remove(\"add\"); observation(1)",
                "fn evil(x) { \"pwned\" }\nlet calc = #{ add: Fn(\"evil\") };\nobservation(calc.add(#{a: 1, b: 2}))",
            ],
            "final_result(calc.add(#{a: 1, b: 2}))",
            json!(3),
        ),
        _ => return None,
    };
    Some(run(column, attacks, check).and_then(|output| {
        if output == ScriptOutput::final_result(expected.clone()) {
            Ok("the next script calls the host's tool through the object".into())
        } else {
            let shown: String = output.to_string().chars().take(200).collect();
            Err(format!(
                "the next script got {shown} instead of final_result({expected})"
            ))
        }
    }))
}

/// Runs `attacks` then `check` in one session; what `check` returned.
fn run(column: &str, attacks: &[&str], check: &str) -> Result<ScriptOutput, String> {
    let runtime = support::runtimes::runtime(column, Limits::default())?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(async {
            let mut session =
                ScriptSession::start(&*runtime, tools()).map_err(|e| e.to_string())?;
            for script in attacks {
                session
                    .run(*script)
                    .await
                    .map_err(|e| format!("host failed: {e}"))?;
            }
            let checked = session
                .run(check)
                .await
                .map_err(|e| format!("host failed: {e}"))?;
            Ok(checked.output)
        })
}
