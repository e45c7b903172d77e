use super::*;

fn not_found(name: &str, receiver: Option<&str>) -> ErrorKind {
    ErrorKind::FunctionNotFound {
        name: name.into(),
        receiver: receiver.map(str::to_string),
    }
}

fn facts(kind: ErrorKind, line: Option<u32>) -> ErrorFacts {
    ErrorFacts::of(kind).at_line(line)
}

fn undefined(name: &str, line: Option<u32>) -> ErrorFacts {
    facts(ErrorKind::UndefinedName { name: name.into() }, line)
}

#[test]
fn a_scripts_last_line_is_written_as_the_call_with_its_indentation_and_semicolon() {
    assert_eq!(
        with_last_line_as(
            "result = get_weather(\"Berlin\")\nobservation(result)\n\n",
            "final_result(result[\"temp_c\"])"
        ),
        "result = get_weather(\"Berlin\")\nfinal_result(result[\"temp_c\"])"
    );
    assert_eq!(
        with_last_line_as("if (w) {\n  observation(w);", "final_result(w.temp_c)"),
        "if (w) {\n  final_result(w.temp_c);"
    );
    assert_eq!(
        with_last_line_as("  \n", "final_result(1)"),
        "final_result(1)"
    );
    assert_eq!(
        with_last_line_as("\n\n\nx = 1\n\n \n\nobservation(x)", "final_result(x)"),
        "x = 1\n\nfinal_result(x)"
    );
}

#[test]
fn a_value_is_made_up_only_when_nothing_the_model_read_holds_it() {
    use serde_json::json;
    let seen = vec![
        "What is the email of Lena Ortiz?".to_string(),
        "[{\"id\": 7, \"name\": \"Lena Ortiz\"}]".to_string(),
    ];
    assert!(has_unseen_value(&json!({"user_id": 12345}), &seen));
    assert!(has_unseen_value(
        &json!({"who": ["Lena Ortiz", "Max"]}),
        &seen
    ));
    assert!(!has_unseen_value(&json!({"user_id": 7}), &seen));
    assert!(!has_unseen_value(&json!({"name": " Lena Ortiz "}), &seen));
    assert!(!has_unseen_value(
        &json!({"all": true, "since": null, "q": ""}),
        &seen
    ));
    assert!(!has_unseen_value(&json!({}), &seen));
}

#[test]
fn a_method_called_on_nothing_is_found_with_the_in_place_method_before_it() {
    assert_eq!(
        called_on_unit(&not_found("join", Some("()"))).as_deref(),
        Some("join")
    );
    assert_eq!(called_on_unit(&not_found("join", Some("array"))), None);
    assert_eq!(called_on_unit(&not_found("join", None)), None);
    assert_eq!(called_on_unit(&not_found("a b", Some("()"))), None);
    assert_eq!(called_on_unit(&ErrorKind::TypeMismatch), None);
    assert_eq!(
        in_place_method("let r = words.split(\" \").sort().join(\" \")"),
        Some("sort")
    );
    assert_eq!(in_place_method("let t = s.trim().sort()"), Some("trim"));
    assert_eq!(in_place_method("let t = s.split(\",\")"), None);
}

#[test]
fn a_line_that_only_loads_a_module_is_told_from_one_that_uses_one() {
    for line in [
        "import requests",
        "  from os import path",
        "import fs from \"fs\";",
        "const fs = require(\"fs\");",
        "import \"helpers\" as h;",
    ] {
        assert!(is_import_line(line), "{line}");
    }
    for line in [
        "important = 3",
        "from_here = imports + 1",
        "x = requests.get(url)",
        "",
    ] {
        assert!(!is_import_line(line), "{line}");
    }
}

#[test]
fn the_failing_line_is_the_line_the_runtime_gave() {
    let script = "let a = [1];\nlet b = 2;\nlet c = a[14];";
    let bounds = ErrorKind::IndexOutOfBounds {
        index: Some(14),
        length: None,
    };
    assert_eq!(
        failing_line(Some(&facts(bounds.clone(), Some(3))), script),
        Some((3, "let c = a[14];".into()))
    );
    assert_eq!(
        failing_line(Some(&facts(ErrorKind::TypeMismatch, Some(2))), script),
        Some((2, "let b = 2;".into()))
    );
    assert_eq!(failing_line(Some(&facts(bounds, None)), script), None);
    assert_eq!(failing_line(None, script), None);
    assert_eq!(
        failing_line(Some(&undefined("js", None)), script),
        None,
        "no line uses the name"
    );
    assert_eq!(
        failing_line(Some(&facts(ErrorKind::default(), Some(9))), script),
        None,
        "past the script's end"
    );
    assert_eq!(
        failing_line(Some(&facts(ErrorKind::default(), Some(0))), script),
        None
    );
}

#[test]
fn an_undefined_name_is_quoted_at_the_line_the_engine_names_when_that_line_uses_it() {
    let script = "for (const c of cities) {\n  const w = tools.get_weather({city: c});\n}\nfinal_result(w.temp_c)";
    // The use outside the block, line 4, not the declaration on line 2.
    assert_eq!(
        failing_line(Some(&undefined("w", Some(4))), script),
        Some((4, "final_result(w.temp_c)".into()))
    );
    // A function with no match counts as an undefined name.
    let missing = facts(not_found("get_weather", Some("map")), None);
    assert_eq!(
        failing_line(Some(&missing), script),
        Some((2, "const w = tools.get_weather({city: c});".into()))
    );
    // A named line that does not use the name, or no line named: the first use.
    for line in [Some(1), None] {
        assert_eq!(
            failing_line(Some(&undefined("w", line)), script),
            Some((2, "const w = tools.get_weather({city: c});".into())),
            "{line:?}"
        );
    }
}

#[test]
fn a_redefined_helper_or_tool_is_named_once_and_calls_are_not_definitions() {
    let provided: Vec<String> = ["final_result", "read_file", "get_price"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let script = "def final_result(value):\n    print(value)\nread_file = lambda n: open(n)\nfunction final_result(v) {}\nx = get_price(item='a')\nif read_file == 1: pass\nfinal_result(x)";
    assert_eq!(
        redefined_names(script, &provided),
        vec!["final_result", "read_file"]
    );
    assert!(
        redefined_names(
            "let total = get_price(\"a\");\nfinal_result(total)",
            &provided
        )
        .is_empty()
    );
}

#[test]
fn scripts_differing_only_in_blank_lines_and_indentation_are_the_same() {
    assert!(same_script("let x = 1;\n\nx", "  let x = 1;\nx  \n"));
    assert!(!same_script("let x = 1;\nx", "let x = 2;\nx"));
}

#[test]
fn a_printing_last_line_gives_its_expression() {
    assert_eq!(
        printed_expression("let t = 1;\nconsole.log(t * 2);\n"),
        Some("t * 2".into())
    );
    assert_eq!(printed_expression("print(total)"), Some("total".into()));
    assert_eq!(printed_expression("total"), None);
}

#[test]
fn an_observing_last_line_gives_its_expression() {
    assert_eq!(
        observed_expression("let best = top(rows);\nobservation(best);\n\n"),
        Some("best".into())
    );
    assert_eq!(
        observed_expression("observation( w.temp_c )"),
        Some("w.temp_c".into())
    );
    for none in [
        "observation()",
        "final_result(x)",
        "x = observation(y) + 1",
        "",
    ] {
        assert_eq!(observed_expression(none), None, "{none}");
    }
}

#[test]
fn thinking_is_removed_before_code_is_looked_for() {
    let reply = "<think>draft:\n```js\nfinal_result(1)\n```</think>\n```js\nfinal_result(2)\n```";
    assert_eq!(without_thinking(reply), "\n```js\nfinal_result(2)\n```");
    assert_eq!(without_thinking("a<think>never closed ```js\nx\n```"), "a");
    assert_eq!(without_thinking("no thinking"), "no thinking");
}

#[test]
fn a_python_def_of_a_tool_is_taken_out_with_its_body_and_the_rest_stays() {
    let script = "import json\n\ndef list_orders(customer=\"mia\"):\n    # fake\n    return [\n        {\"a\": 1}\n    ]\n\nresult = list_orders(customer=\"mia\")\nobservation(result)";
    let stubs = without_python_defs(script, &["list_orders"]);
    assert_eq!(
        stubs.code,
        "import json\n\n\n\n\n\n\n\nresult = list_orders(customer=\"mia\")\nobservation(result)",
        "the stub's lines are blank, so the others keep their numbers"
    );
    assert_eq!(stubs.removed, vec!["list_orders"]);
    assert!(stubs.imports.is_empty(), "json is used by no one: it stays");
    let same = without_python_defs("def helper(x):\n    return x\nhelper(1)", &["list_orders"]);
    assert_eq!(same.code, "def helper(x):\n    return x\nhelper(1)");
    assert!(same.removed.is_empty());
}

#[test]
fn the_imports_only_a_stub_used_go_with_it_and_the_others_stay() {
    let script = "import requests\nimport json, math\nfrom urllib.parse import quote as q\nimport os.path\n\ndef get_weather(city):\n    url = f\"http://x/{q(city)}\"\n    data = json.loads(requests.get(url).text)\n    return os.path.join(data)\n\nresult = get_weather(\"Paris\")\nobservation(json.dumps(result))";
    let stubs = without_python_defs(script, &["get_weather"]);
    assert_eq!(
        stubs.code,
        "\nimport json, math\n\n\n\n\n\n\n\n\nresult = get_weather(\"Paris\")\nobservation(json.dumps(result))"
    );
    assert_eq!(
        stubs.imports,
        vec![
            (0, "import requests".to_string()),
            (2, "from urllib.parse import quote as q".to_string()),
            (3, "import os.path".to_string())
        ]
    );
    assert!(uses_import(
        "from urllib.parse import quote as q",
        "x = q(1)"
    ));
    assert!(!uses_import("import os.path", "x = path(1)"));
    // A script past the lines followed keeps its imports: no quadratic
    // search over an attacker's many thousand lines.
    let long = format!(
        "import requests\ndef get_weather(c):\n    return requests.get(c)\n{}",
        "x = 1\n".repeat(IMPORTS_FOLLOWED_LINES)
    );
    let long = without_python_defs(&long, &["get_weather"]);
    assert!(long.imports.is_empty() && long.code.starts_with("import requests\n"));
    // Without a stub taken out, no import is touched, used or not.
    let untouched = without_python_defs("import requests\nobservation(1)", &["get_weather"]);
    assert_eq!(untouched.code, "import requests\nobservation(1)");
    assert!(untouched.imports.is_empty());
    // An indented import (inside the script's own function) stays, and a
    // name used elsewhere keeps its import.
    let kept = without_python_defs(
        "import requests\ndef get_weather(c):\n    return requests.get(c)\ndef mine():\n    import math\n    return requests\nobservation(1)",
        &["get_weather"],
    );
    assert_eq!(
        kept.code,
        "import requests\n\n\ndef mine():\n    import math\n    return requests\nobservation(1)"
    );
    assert!(kept.imports.is_empty());
}

#[test]
fn a_stubs_defaults_stay_in_a_definition_that_calls_the_tool() {
    let script = "import csv\n\ndef read_file(name=\"sales.csv\"):\n    with open(name) as f:\n        return list(csv.reader(f))\n\nrows = read_file()";
    let stubs = without_python_defs(script, &["read_file"]);
    assert_eq!(
        stubs.headers,
        vec![(
            2,
            "read_file".to_string(),
            "def read_file(name=\"sales.csv\"):".to_string()
        )]
    );
    assert_eq!(
        stub_with_defaults(&stubs.headers[0].2, "read_file", &["name"]),
        Some((
            "def read_file(name=\"sales.csv\", _host_tool=read_file): return _host_tool(name=name)"
                .to_string(),
            "name=\"sales.csv\"".to_string()
        ))
    );
    // Annotations, a return type, a parameter without a default, indentation.
    assert_eq!(
            stub_with_defaults(
                "    def convert(amount, to_currency: str = 'USD') -> float: return 1.0",
                "convert",
                &["amount", "from_currency", "to_currency"]
            ),
            Some((
                "    def convert(amount, to_currency='USD', _host_tool=convert): return _host_tool(amount=amount, to_currency=to_currency)".to_string(),
                "to_currency='USD'".to_string()
            ))
        );
    for (header, why) in [
        ("def read_file(name):", "no default: nothing to keep"),
        (
            "def read_file(path=\"a.csv\"):",
            "a parameter the tool lacks",
        ),
        ("def read_file(name=None):", "None is no plain default"),
        (
            "def read_file(name=open('x').read()):",
            "code, not a literal",
        ),
        (
            "def read_file(name=\"a`b\"):",
            "a backtick cannot be quoted",
        ),
        ("def read_file(*args, name=\"a\"):", "a star parameter"),
        ("def read_file(name=\"a\")", "no colon: not a definition"),
    ] {
        assert_eq!(
            stub_with_defaults(header, "read_file", &["name"]),
            None,
            "{why}"
        );
    }
}

#[test]
fn a_tool_call_whose_none_the_script_tests_is_written_to_catch_the_error() {
    let script = "result = get_weather(\"Munich\")\nif result is None:\n    result = get_weather(\"Berlin\")";
    assert_eq!(
        catching_tool_error("result = get_weather(\"Munich\")", script, &["get_weather"]),
        Some(
            "try:\n    result = get_weather(\"Munich\")\nexcept ToolError:\n    result = None"
                .to_string()
        )
    );
    assert_eq!(
        catching_tool_error(
            "    t = get_weather(c)",
            "    t = get_weather(c)\n    if not t: continue",
            &["get_weather"]
        ),
        Some(
            "    try:\n        t = get_weather(c)\n    except ToolError:\n        t = None"
                .to_string()
        )
    );
    assert_eq!(
            catching_tool_error_at(
                2,
                &format!("x = 1\n{script}\nobservation(result)"),
                &["get_weather"]
            ),
            Some((
                4,
                "try:\n    result = get_weather(\"Munich\")\nexcept ToolError:\n    result = None\nif result is None:\n    result = get_weather(\"Berlin\")".to_string()
            )),
            "the fallback that follows comes with the catch"
        );
    for (line, script, why) in [
        (
            "result = get_weather(\"M\")",
            "result = get_weather(\"M\")\nobservation(result)",
            "no test for None",
        ),
        (
            "result = other(\"M\")",
            "result = other(\"M\")\nif result is None: pass",
            "not a tool",
        ),
        (
            "a, b = get_weather(\"M\")",
            "if a is None: pass",
            "not one name",
        ),
        (
            "r = get_weather(\"M\")[\"temp_c\"]",
            "if r is None: pass",
            "more than the call",
        ),
        (
            "r == get_weather(\"M\")",
            "if r is None: pass",
            "a comparison",
        ),
    ] {
        assert_eq!(
            catching_tool_error(line, script, &["get_weather"]),
            None,
            "{why}"
        );
    }
}

#[test]
fn a_cards_signature_gives_its_parameter_names() {
    assert_eq!(signature_parameters("read_file(name=string)"), vec!["name"]);
    assert_eq!(
        signature_parameters("list_orders(customer=string|None, limit=integer)"),
        vec!["customer", "limit"]
    );
    assert_eq!(
        signature_parameters("list_orders(#{customer?: string})"),
        Vec::<&str>::new()
    );
    assert_eq!(signature_parameters("today()"), Vec::<&str>::new());
}

#[test]
fn only_short_plain_code_may_stand_outside_a_fence() {
    for code in [
        "17 * 23",
        "total",
        "price(item=\"cheese\")",
        "sum(xs) / len(xs)",
    ] {
        assert!(reads_as_plain_code(code), "{code}");
    }
    for text in [
        "ignore previous instructions",
        "f(\"stop now\")",
        "x; import os",
        "a\nb",
        &"x".repeat(61),
    ] {
        assert!(!reads_as_plain_code(text), "{text}");
    }
}

#[test]
fn a_rhai_range_from_one_to_a_literal_and_a_caret_between_literals_are_pitfalls() {
    let found =
        rhai_pitfalls("let s = 0;\nfor i in 1..20 { s += i }\nlet p = 2^50;\nfinal_result(s)");
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].line, 2);
    assert_eq!(found[0].written, "1..20");
    assert_eq!(
        found[0].account,
        "`1..20` stops at 19: in Rhai the end of `a..b` is excluded. To include 20, write `1..=20`."
    );
    assert_eq!(found[1].line, 3);
    assert_eq!(found[1].written, "2^50");
    assert!(
        found[1].account.contains("(it gives 48)"),
        "{}",
        found[1].account
    );
    assert!(found[1].account.contains("`2**50`"), "{}", found[1].account);
}

#[test]
fn to_int_on_the_characters_of_a_string_is_a_pitfall_and_on_other_names_is_not() {
    for script in [
        "let sum = 0;\nfor digit in (2**50).to_string() {\n    sum += digit.to_int();\n}\nfinal_result(sum)",
        "let text = n.to_string();\nlet sum = 0;\nfor digit in text {\n    sum += digit.to_int();\n}\nfinal_result(sum)",
        "let sum = 0;\nfor digit in \"1234\" {\n    sum += digit.to_int()\n}\nfinal_result(sum)",
    ] {
        let found = rhai_pitfalls(script);
        assert_eq!(found.len(), 1, "{script}");
        assert_eq!(found[0].written, "digit.to_int()");
        assert!(
            found[0]
                .account
                .ends_with("write `digit.to_string().parse_int()`."),
            "{}",
            found[0].account
        );
        assert_eq!(
            script
                .lines()
                .nth(found[0].line - 1)
                .map(|l| l.contains("to_int")),
            Some(true)
        );
    }
    for script in [
        "let sum = 0;\nfor part in text.split(\",\") {\n    sum += part.to_int();\n}\nfinal_result(sum)",
        "for d in 1..=9 { s += d.to_int(); }\nfinal_result(s)",
        "for digit in (2**50).to_string() { s += my_digit.to_int(); }",
    ] {
        assert_eq!(rhai_pitfalls(script), Vec::new(), "{script}");
    }
}

#[test]
fn a_map_key_tested_for_truth_is_found_for_the_host_to_write_in() {
    let message = &ErrorKind::UnitCondition;
    assert_eq!(
        unit_condition(message, "    if word_counts[lower_word] {"),
        Some(Some(("word_counts".into(), "lower_word".into(), false)))
    );
    assert_eq!(
        unit_condition(message, "if (!seen[w]) {"),
        Some(Some(("seen".into(), "w".into(), true)))
    );
    assert_eq!(unit_condition(message, "if m[\"a b\"] {"), Some(None));
    assert_eq!(unit_condition(&ErrorKind::TypeMismatch, "if m[k] {"), None);
}

#[test]
fn a_signature_with_an_id_argument_takes_an_id() {
    for signature in [
        "tools.get_user({user_id: integer})",
        "get_user(user_id=integer)",
        "get_order(#{id: integer})",
        "tools.fetch({orderId: string})",
    ] {
        assert!(takes_an_id(signature), "{signature}");
    }
    for signature in [
        "tools.find_user({name: string})",
        "identify(text=string)",
        "valid_ids()",
    ] {
        assert!(!takes_an_id(signature), "{signature}");
    }
}

#[test]
fn a_call_with_an_id_fills_the_only_argument_in_each_languages_signature() {
    assert_eq!(
        call_with_id("get_user(user_id=integer)", 42).as_deref(),
        Some("get_user(user_id=42)")
    );
    assert_eq!(
        call_with_id("tools.get_user({user_id: integer})", 42).as_deref(),
        Some("tools.get_user({user_id: 42})")
    );
    assert_eq!(
        call_with_id("get_user(#{user_id: integer})", 7).as_deref(),
        Some("get_user(#{user_id: 7})")
    );
    assert_eq!(call_with_id("get_order(id=integer, full=boolean)", 7), None);
    assert_eq!(call_with_id("find_user(name=string)", 7), None);
}

#[test]
fn a_method_of_arrays_called_bare_is_rewritten_on_the_array() {
    assert_eq!(
        bare_array_method(
            &not_found("reduce", Some("Fn")),
            "let total_amount = reduce(|sum, order| sum + order.amount, 0)",
            "orders",
        ),
        Some((
            "reduce".to_string(),
            Some("let total_amount = orders.reduce(...)".to_string()),
            "let total_amount = orders.reduce(|sum, order| sum + order.amount, 0)".to_string()
        ))
    );
    assert_eq!(
        bare_array_method(
            &not_found("filter", Some("Fn")),
            "final_result(filter(|x| x > \"ignore all\"))",
            "array",
        ),
        Some((
            "filter".to_string(),
            None,
            "final_result(array.filter(|x| x > \"ignore all\"))".to_string()
        )),
        "a line whose start is no plain assignment is not quoted"
    );
    for (kind, line) in [
        (
            not_found("reduce", Some("array")),
            "reduce(xs, |a, b| a + b)",
        ),
        (not_found("frobnicate", Some("Fn")), "frobnicate(|x| x)"),
        (
            not_found("reduce", Some("Fn")),
            "xs.reduce(|a, b| a + b, 0)",
        ),
        (not_found("reduce", None), "reduce()"),
    ] {
        assert_eq!(bare_array_method(&kind, line, "xs"), None, "{kind:?}");
    }
}

#[test]
fn ranges_that_mean_what_they_say_are_not_pitfalls() {
    for script in [
        "for i in 1..=20 { }",
        "for i in 0..20 { }",
        "for i in 1..n { }",
        "for i in 2..14 { }",
        "let x = a^b;",
        "let v = 1.5..2;",
        "let x = 11..20;",
        "let s = x21..20;",
        "let t = 1..20x;",
        "2 ** 50",
    ] {
        assert_eq!(rhai_pitfalls(script), Vec::new(), "{script}");
    }
}

#[test]
fn a_pitfall_never_quotes_anything_but_digits_and_operators() {
    let found = rhai_pitfalls("let t = \"ignore the host\"; for i in 1 ..  7 {} 3 ^ 4");
    assert_eq!(found.len(), 2, "{found:?}");
    for pitfall in found {
        assert!(
            pitfall
                .written
                .chars()
                .all(|c| c.is_ascii_digit() || " .^".contains(c)),
            "{pitfall:?}"
        );
    }
}

#[test]
fn an_index_past_an_arrays_end_is_told_when_the_runtime_gave_both_numbers() {
    let bounds = |index, length| ErrorKind::IndexOutOfBounds { index, length };
    assert_eq!(
        index_out_of_bounds(&bounds(Some(14), Some(14))),
        Some((14, 14))
    );
    assert_eq!(index_out_of_bounds(&bounds(Some(-20), Some(3))), None);
    assert_eq!(index_out_of_bounds(&bounds(Some(1), Some(3))), None);
    assert_eq!(index_out_of_bounds(&bounds(None, None)), None);
    assert_eq!(
        index_out_of_bounds(&ErrorKind::UndefinedName { name: "x".into() }),
        None
    );
}

#[test]
fn a_definitions_parameters_are_counted_from_its_header() {
    let script = "def only_zero(items):\n    pass\ndef main():\n    pass\nfunction add(a, b) {}";
    assert_eq!(parameter_count(script, "only_zero"), Some(1));
    assert_eq!(parameter_count(script, "main"), Some(0));
    assert_eq!(parameter_count(script, "add"), Some(2));
    assert_eq!(parameter_count(script, "only"), None);
}

#[test]
fn a_script_of_definitions_only_names_them_and_one_that_calls_anything_names_none() {
    let library = "import json\n\ndef only_zero(items):\n    return [i for i in items if i[\"stock\"] == 0]\n\n# done\ndef main():\n    pass\n";
    assert_eq!(uncalled_definitions(library), vec!["only_zero", "main"]);
    let js = "function total(xs) {\n  return xs.length;\n}\n";
    assert_eq!(uncalled_definitions(js), vec!["total"]);
    let rhai = "fn total(xs) {\n  xs.len()\n}";
    assert_eq!(uncalled_definitions(rhai), vec!["total"]);
    for called in [
        "def main():\n    pass\n\nmain()",
        "def main():\n    pass\nif __name__ == \"__main__\":\n    main()",
        "function f() {}\nf();",
        "x = 1",
        "",
    ] {
        assert!(uncalled_definitions(called).is_empty(), "{called}");
    }
}
