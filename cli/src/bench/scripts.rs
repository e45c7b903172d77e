//! The benchmark's scripts, written once per language so every backend runs the
//! same work: Rhai, JavaScript (Boa and QuickJS) and Python (MicroPython, CPython).

/// The language a runtime takes, which decides the scripts it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Rhai.
    Rhai,
    /// JavaScript: Boa (`js`, `js-in-process`) and QuickJS (`wasm:js`).
    Js,
    /// Python: MicroPython and CPython guests.
    Python,
}

impl Lang {
    /// The language of a runtime by its language name (`RuntimeInfo::language`);
    /// `None` for a language the benchmark has no scripts for.
    pub fn from_language(language: &str) -> Option<Self> {
        match language.to_ascii_lowercase().as_str() {
            "rhai" => Some(Lang::Rhai),
            "javascript" | "js" => Some(Lang::Js),
            "python" => Some(Lang::Python),
            _ => None,
        }
    }

    /// Returns `{"type":"final_result","value":42}` after a little arithmetic.
    pub fn trivial(self) -> &'static str {
        "final_result(40 + 2)"
    }

    /// Makes a variable `big` holding a string of 10,485,760 characters; the result
    /// is its length.
    pub fn ten_megabytes(self) -> &'static str {
        match self {
            Lang::Rhai => {
                "let big = \"0123456789\"; while big.len() < 10_000_000 { big += big; } final_result(big.len())"
            }
            Lang::Js => "var big = \"0123456789\".repeat(1048576); final_result(big.length)",
            Lang::Python => "big = \"0123456789\" * 1048576\nfinal_result(len(big))",
        }
    }

    /// The length of `big` as the final result.
    pub fn length_of_big(self) -> &'static str {
        match self {
            Lang::Rhai => "final_result(big.len())",
            Lang::Js => "final_result(big.length)",
            Lang::Python => "final_result(len(big))",
        }
    }

    /// Calls the `add` tool 1,000 times; the result is 500,500.
    pub fn tool_calls(self) -> &'static str {
        match self {
            Lang::Rhai => {
                "let s = 0; for i in 0..1000 { s += call_tool(\"add\", #{a: i, b: 1}); } final_result(s)"
            }
            Lang::Js => {
                "let s = 0; for (let i = 0; i < 1000; i++) s += tools.add({a: i, b: 1}); final_result(s)"
            }
            Lang::Python => "s = 0\nfor i in range(1000):\n    s += add(a=i, b=1)\nfinal_result(s)",
        }
    }

    /// Calls the MCP server's `add` (as the tool `bench_add`, answering `{sum}`)
    /// 100 times; the result is 5,050.
    pub fn mcp_tool_calls(self) -> &'static str {
        match self {
            Lang::Rhai => {
                "let s = 0; for i in 0..100 { s += bench_add(#{a: i, b: 1}).sum; } final_result(s)"
            }
            Lang::Js => {
                "let s = 0; for (let i = 0; i < 100; i++) s += tools.bench_add({a: i, b: 1}).sum; final_result(s)"
            }
            Lang::Python => {
                "s = 0\nfor i in range(100):\n    s += bench_add(a=i, b=1)[\"sum\"]\nfinal_result(s)"
            }
        }
    }

    /// Sums 1..=1,000,000 in a plain loop; the result is 500,000,500,000.
    pub fn sum(self) -> &'static str {
        match self {
            Lang::Rhai => "let s = 0; for i in 1..=1000000 { s += i; } final_result(s)",
            Lang::Js => "let s = 0; for (let i = 1; i <= 1000000; i++) s += i; final_result(s)",
            Lang::Python => "s = 0\nfor i in range(1, 1000001):\n    s += i\nfinal_result(s)",
        }
    }

    /// Never ends on its own.
    pub fn infinite_loop(self) -> &'static str {
        match self {
            Lang::Rhai => "let x = 0; loop { x += 1; }",
            Lang::Js => "let x = 0; while (true) { x += 1; }",
            Lang::Python => "x = 0\nwhile True:\n    x += 1",
        }
    }

    /// Waits on ten calls of the `slow` tool at once; the result is 10 (how
    /// many answered).
    pub fn parallel_calls(self) -> &'static str {
        match self {
            Lang::Rhai => {
                "let r = parallel([|| slow(#{n: 0}), || slow(#{n: 1}), || slow(#{n: 2}), || slow(#{n: 3}), || slow(#{n: 4}), || slow(#{n: 5}), || slow(#{n: 6}), || slow(#{n: 7}), || slow(#{n: 8}), || slow(#{n: 9})]); final_result(r.len())"
            }
            Lang::Js => {
                "const r = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => tools.slow({n}))); final_result(r.length)"
            }
            Lang::Python => {
                "import asyncio\nr = await asyncio.gather(*[slow(n=i) for i in range(10)])\nfinal_result(len(r))"
            }
        }
    }

    /// Calls the `slower` tool three times, one after another; the result is 3
    /// (how many answered).
    pub fn slow_calls(self) -> &'static str {
        match self {
            Lang::Rhai => "let n = 0; for i in 0..3 { slower(#{n: i}); n += 1; } final_result(n)",
            Lang::Js => {
                "let n = 0; for (let i = 0; i < 3; i++) { tools.slower({n: i}); n += 1; } final_result(n)"
            }
            Lang::Python => {
                "n = 0\nfor i in range(3):\n    slower(n=i)\n    n += 1\nfinal_result(n)"
            }
        }
    }

    /// Fetches a value from the `data` tool and returns it unchanged.
    pub fn json_round_trip(self) -> &'static str {
        match self {
            Lang::Rhai => "let d = call_tool(\"data\", #{}); final_result(d)",
            Lang::Js => "let d = tools.data({}); final_result(d)",
            Lang::Python => "d = data()\nfinal_result(d)",
        }
    }

    /// Step `step` of the benchmark's agent run: a new variable, an observation.
    pub fn agent_step(self, step: usize) -> String {
        match self {
            Lang::Rhai => format!("let x{step} = {step};\nobservation(x{step} * 2)"),
            Lang::Js => format!("let x{step} = {step};\nobservation(x{step} * 2)"),
            Lang::Python => format!("x{step} = {step}\nobservation(x{step} * 2)"),
        }
    }

    /// The last step of the agent run: `final_result(x{last} + 1)`.
    pub fn agent_final(self, last: usize) -> String {
        format!("final_result(x{last} + 1)")
    }

    /// A step of a long session: keeps a small list in a new variable `v{step}`
    /// (so the session's state grows with its history) and returns its length.
    pub fn history_step(self, step: usize) -> String {
        match self {
            Lang::Rhai => {
                format!("let v{step} = [{step}, \"s{step}\", true]; observation(v{step}.len())")
            }
            Lang::Js => {
                format!("let v{step} = [{step}, \"s{step}\", true]; observation(v{step}.length)")
            }
            Lang::Python => {
                format!("v{step} = [{step}, \"s{step}\", True]\nobservation(len(v{step}))")
            }
        }
    }

    /// After [`Lang::history_step`] 1 to 100: observes the lengths of `v1` and
    /// `v100` added up (6).
    pub fn history_check(self) -> &'static str {
        match self {
            Lang::Rhai => "observation(v1.len() + v100.len())",
            Lang::Js => "observation(v1.length + v100.length)",
            Lang::Python => "observation(len(v1) + len(v100))",
        }
    }

    /// A script of at least `bytes` bytes: a counter incremented once per line,
    /// then returned. Returns the script and the count it returns.
    pub fn sized(self, bytes: usize) -> (String, i64) {
        let (head, line, tail) = match self {
            Lang::Rhai => ("let n = 0;\n", "n += 1;\n", "final_result(n)"),
            Lang::Js => ("let n = 0;\n", "n += 1;\n", "final_result(n)"),
            Lang::Python => ("n = 0\n", "n += 1\n", "final_result(n)"),
        };
        let lines = bytes
            .saturating_sub(head.len() + tail.len())
            .div_ceil(line.len());
        let mut script = String::with_capacity(bytes + line.len());
        script.push_str(head);
        for _ in 0..lines {
            script.push_str(line);
        }
        script.push_str(tail);
        (script, i64::try_from(lines).unwrap_or(i64::MAX))
    }
}

/// A JSON value of about `bytes` bytes (as compact JSON): records like an API
/// listing (ids, names, prices, flags, tags). Prices are exact binary fractions,
/// so every engine gives them back digit for digit.
pub fn sample_value(bytes: usize) -> serde_json::Value {
    let mut items = Vec::new();
    let mut size = 2;
    let mut i = 0u32;
    while size < bytes {
        let item = serde_json::json!({
            "id": i,
            "name": format!("item number {i}"),
            "price": f64::from(i % 97) + 0.25,
            "in_stock": !i.is_multiple_of(3),
            "tags": ["alpha", "beta"],
        });
        size += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    serde_json::Value::Array(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_scripts_reach_the_size_asked_for() {
        for lang in [Lang::Rhai, Lang::Js, Lang::Python] {
            for bytes in [1024, 10 * 1024] {
                let (script, count) = lang.sized(bytes);
                assert!(script.len() >= bytes, "{lang:?} {bytes}: {}", script.len());
                assert!(
                    script.len() < bytes + 16,
                    "{lang:?} {bytes}: {}",
                    script.len()
                );
                assert!(count > 100);
            }
        }
    }

    #[test]
    fn the_sample_value_is_about_the_size_asked_for() {
        let len = sample_value(10 * 1024).to_string().len();
        assert!((10 * 1024..11 * 1024).contains(&len), "{len}");
    }

    #[test]
    fn languages_are_known_by_their_runtime_language_names() {
        assert_eq!(Lang::from_language("Rhai"), Some(Lang::Rhai));
        assert_eq!(Lang::from_language("JavaScript"), Some(Lang::Js));
        assert_eq!(Lang::from_language("Python"), Some(Lang::Python));
        assert_eq!(Lang::from_language("Lua"), None);
    }
}
