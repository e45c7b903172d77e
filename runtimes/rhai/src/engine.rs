//! The hardened, shared Rhai engine: built once per [`Limits`], used by every session.

use std::sync::OnceLock;

use codeact_runtime::{Enforcement, LimitKind, Limits, ToolError};
use rhai::module_resolvers::DummyModuleResolver;
use rhai::packages::{Package, StandardPackage};
use rhai::{
    Dynamic, Engine, EvalAltResult, ImmutableString, Map, Module, NativeCallContext, Shared,
};

use crate::memory_meter::{self, Event};
use crate::stops::{ALLOCATION_TOKEN, DEADLINE_TOKEN, out_of_time};
use crate::{bounded_builtins, convert, run_state};

/// Per-value caps derived from [`Limits::max_memory_bytes`]. Rhai counts nested
/// values recursively, so each cap bounds one value as a whole.
pub(crate) struct ValueCaps {
    pub string_bytes: usize,
    pub array_items: usize,
    pub map_entries: usize,
}

impl ValueCaps {
    pub fn from_limits(limits: &Limits) -> Self {
        // Rhai treats 0 as "unlimited", so every cap is at least 1.
        let memory = limits.max_memory_bytes;
        Self {
            string_bytes: (memory / 4).max(1),
            array_items: (memory / 64).max(1),
            map_entries: (memory / 128).max(1),
        }
    }
}

/// How the Rhai backend enforces each limit.
pub(crate) const ENFORCEMENT: &[Enforcement] = &[
    Enforcement {
        limit: LimitKind::WallTime,
        how: "a shared timer thread raises the run's flag at the deadline; on_progress checks it on every operation and terminates the run, so a run overshoots by at most one operation, whose cost is bounded by the per-value caps (padding a string to the cap takes tens of milliseconds). The clock stops while a call (or a parallel batch) waits on the host: the deadline moves later by the wait, and a flag the timer raised at the earlier deadline is checked against the clock once and armed again, so only runs that waited pay for it; a tool call in progress is not interrupted",
    },
    Enforcement {
        limit: LimitKind::TotalTime,
        how: "the same flag and deadline: a wait never moves the deadline past the total, and a run found past it when a call returns ends there, whatever the call answered; each call is bounded by the total deadline (call_deadline)",
    },
    Enforcement {
        limit: LimitKind::Operations,
        how: "Engine::set_max_operations, counted per run; not catchable by the script",
    },
    Enforcement {
        limit: LimitKind::Memory,
        how: "what the run allocates and has not freed, wherever the engine keeps it (values in flight such as the array a `map` builds or call arguments, closure captures, curried function pointers, recursion frames), checked on every operation against the limit less what the session's variables held at the start, so a run overshoots by at most one operation's allocation (at most one value at its per-value cap); this needs codeact::MeteredAllocator as the process's global allocator (the codeact binary installs it; an embedding application adds one line, and without it the next two guards are all there is). Per value, when an operation returns it: a string may hold 1/4 of the limit in bytes, an array 1/64 in items, a map 1/128 in entries, counted through nested values (pad, replace, split and to_chars size their result before building it). In total over the variables every frame of the call stack holds, through arrays, maps, curried function pointers and closure captures (each shared value once), scanned on variable reads and definitions at amortised cost: this bounds what a session keeps from run to run",
    },
    Enforcement {
        limit: LimitKind::CallDepth,
        how: "Engine::set_max_call_levels",
    },
    Enforcement {
        limit: LimitKind::NestingDepth,
        how: "Engine::set_max_expr_depths when parsing; checked again when a value crosses to JSON",
    },
    Enforcement {
        limit: LimitKind::Variables,
        how: "Engine::set_max_variables over the session's whole scope, across runs",
    },
    Enforcement {
        limit: LimitKind::Functions,
        how: "Engine::set_max_functions per script, and again over the session's accumulated functions",
    },
    Enforcement {
        limit: LimitKind::Output,
        how: "print and debug go to a per-run buffer that keeps the first max_output_bytes and counts the rest",
    },
];

/// The standard library, built once per process and shared by every engine.
fn standard_library() -> Shared<Module> {
    static LIBRARY: OnceLock<Shared<Module>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| StandardPackage::new().as_shared_module())
        .clone()
}

/// Builds an engine with the standard library, the codeact helpers, and every limit
/// set; no module imports, no `eval`, no file or network access (Rhai has none
/// unless registered).
pub(crate) fn build(limits: &Limits) -> Engine {
    let mut engine = Engine::new_raw();
    engine.register_global_module(standard_library());
    engine.set_module_resolver(DummyModuleResolver::new());
    engine.disable_symbol("eval");
    engine.disable_symbol("import");

    let caps = ValueCaps::from_limits(limits);
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_depth)
        .set_max_expr_depths(limits.max_nesting_depth, limits.max_nesting_depth)
        .set_max_string_size(caps.string_bytes)
        .set_max_array_size(caps.array_items)
        .set_max_map_size(caps.map_entries)
        .set_max_variables(limits.max_variables.max(1))
        .set_max_functions(limits.max_functions.max(1))
        .set_max_modules(1);

    engine.on_print(run_state::log_line);
    engine.on_debug(|text, _source, position| {
        run_state::log_line(&format!("[debug {position}] {text}"));
    });
    engine.on_progress(|operations| {
        if run_state::time_is_up(operations) {
            Some(Dynamic::from(DEADLINE_TOKEN))
        } else if run_state::over_allocation_budget() {
            Some(Dynamic::from(ALLOCATION_TOKEN))
        } else {
            None
        }
    });

    let max_bytes = limits.max_memory_bytes;
    // `on_var` and `on_def_var` are marked deprecated only as "volatile"; rhai
    // documents them as supported.
    #[allow(deprecated)]
    engine
        .on_var(move |_name, _index, context| {
            memory_meter::on_access(&context, Event::Read, max_bytes).map(|()| None)
        })
        .on_def_var(move |at_run_time, _info, context| {
            if at_run_time {
                memory_meter::on_access(&context, Event::Define, max_bytes)?;
            }
            Ok(true)
        });

    bounded_builtins::register(&mut engine);
    register_helpers(&mut engine, limits.max_nesting_depth);
    engine
}

/// `reduce` over the numbers of `array` (integers and floats), as an integer when
/// every item is one and the result is whole; an error naming the first item that
/// is not a number.
fn numbers(
    array: &rhai::Array,
    reduce: impl Fn(&[f64]) -> f64,
) -> Result<Dynamic, Box<rhai::EvalAltResult>> {
    if array.is_empty() {
        return Err("the array is empty".into());
    }
    let mut all = Vec::with_capacity(array.len());
    let mut integers = true;
    for item in array {
        if let Ok(n) = item.as_int() {
            all.push(n as f64);
        } else if let Ok(x) = item.as_float() {
            integers = false;
            all.push(x);
        } else {
            return Err(format!(
                "the array holds {} ({}), not a number",
                item,
                item.type_name()
            )
            .into());
        }
    }
    let result = reduce(&all);
    Ok(
        if integers && result.fract() == 0.0 && result.abs() < 9e15 {
            Dynamic::from(result as rhai::INT)
        } else {
            Dynamic::from(result)
        },
    )
}

/// A result helper's output, remembered as the run's last: a script that
/// ends in a statement (a `for` loop whose body calls `observation(…)`)
/// answers with it, as the JavaScript and Python runtimes do.
fn tagged(kind: &str, field: &str, value: Dynamic) -> Map {
    let mut map = Map::new();
    map.insert("type".into(), Dynamic::from(kind.to_string()));
    map.insert(field.into(), value);
    run_state::remember_output(&map);
    map
}

fn register_helpers(engine: &mut Engine, max_depth: usize) {
    // `xs.length` is the JavaScript spelling models reach for; Rhai's is `xs.len()`.
    engine.register_get("length", |array: &mut rhai::Array| array.len() as rhai::INT);
    engine.register_get("length", |text: &mut ImmutableString| {
        text.chars().count() as rhai::INT
    });
    // Spellings models bring from JavaScript and Python; Rhai lacks them.
    crate::spellings::register(engine);
    // Rhai's own `parse_json` reads only an object: a file or a tool's text
    // holding a JSON list (the commonest data a script parses) was an error.
    // This one reads any JSON value, nested at most as deep as a tool result.
    engine.register_fn(
        "parse_json",
        move |text: ImmutableString| -> Result<Dynamic, Box<EvalAltResult>> {
            let value: serde_json::Value = serde_json::from_str(text.as_str())
                .map_err(|e| format!("parse_json: the text is not JSON: {e}"))?;
            convert::from_json(&value, max_depth).map_err(|e| format!("parse_json: {e}").into())
        },
    );
    engine.register_fn("join", |array: &mut rhai::Array, separator: &str| {
        array
            .iter()
            .map(|item| item.to_string())
            .collect::<Vec<_>>()
            .join(separator)
    });
    engine.register_fn("sum", |array: &mut rhai::Array| {
        numbers(array, |all| all.iter().sum::<f64>())
    });
    engine.register_fn("max", |array: &mut rhai::Array| {
        numbers(array, |all| {
            all.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        })
    });
    engine.register_fn("min", |array: &mut rhai::Array| {
        numbers(array, |all| {
            all.iter().copied().fold(f64::INFINITY, f64::min)
        })
    });
    engine.register_fn(
        "to_float",
        |text: &str| -> Result<rhai::FLOAT, Box<rhai::EvalAltResult>> {
            text.trim()
                .parse::<rhai::FLOAT>()
                .map_err(|_| format!("'{text}' is not a number").into())
        },
    );
    engine.register_fn(
        "to_int",
        |text: &str| -> Result<rhai::INT, Box<rhai::EvalAltResult>> {
            text.trim()
                .parse::<rhai::INT>()
                .map_err(|_| format!("'{text}' is not a whole number").into())
        },
    );
    engine.register_fn("observation", |value: Dynamic| {
        tagged("observation", "value", value)
    });
    engine.register_fn("final_result", |value: Dynamic| {
        tagged("final_result", "value", value)
    });
    // The files a tool wrote for the answer, relative to the working directory.
    engine.register_fn("final_result", |value: Dynamic, artifacts: rhai::Array| {
        let mut map = tagged("final_result", "value", value);
        map.insert("artifacts".into(), Dynamic::from_array(artifacts));
        run_state::remember_output(&map);
        map
    });
    engine.register_fn("error", |message: Dynamic| {
        tagged("error", "message", Dynamic::from(message.to_string()))
    });
    engine.register_fn("transfer_to_agent", |name: ImmutableString| {
        tagged("transfer_to_agent", "agent_name", Dynamic::from(name))
    });
    engine.register_fn(
        "call_tool",
        move |ctx: NativeCallContext, name: &str, args: Dynamic| {
            call_tool(&ctx, name, &args, max_depth)
        },
    );
    engine.register_fn("call_tool", move |ctx: NativeCallContext, name: &str| {
        call_tool(&ctx, name, &Dynamic::from_map(Map::new()), max_depth)
    });
    crate::parallel::register(engine, max_depth);
}

fn call_tool(
    ctx: &NativeCallContext,
    name: &str,
    args: &Dynamic,
    max_depth: usize,
) -> Result<Dynamic, Box<EvalAltResult>> {
    let thrown = |message: String| {
        Box::new(EvalAltResult::ErrorRuntime(
            message.into(),
            ctx.call_position(),
        ))
    };
    let tools = run_state::tools()
        .ok_or_else(|| thrown("call_tool is only available while a script runs".into()))?;
    let args = convert::to_json(args, max_depth)
        .map_err(|e| thrown(format!("arguments of tool '{name}' cannot be sent: {e}")))?;
    if crate::parallel::recording() {
        return Ok(crate::parallel::record(name, args));
    }
    let started = std::time::Instant::now();
    let called = tools.call(name, args);
    run_state::waited(started.elapsed());
    out_of_time(ctx)?;
    match called {
        Ok(result) => convert::from_json(&result, max_depth)
            .map_err(|e| thrown(format!("result of tool '{name}' cannot be used: {e}"))),
        Err(ToolError { message }) => Err(thrown(format!("tool '{name}' failed: {message}"))),
    }
}
