//! JSON Schema checks of schemas the host did not write (a client's output
//! schema, an MCP server's parameters) under a budget, so that no schema and no
//! value can hold a thread for long.
//!
//! A schema of a few kilobytes can cost exponential time: forty `$defs` whose
//! `anyOf` names the next one twice make a check take ~2^40 steps, and a
//! recursive `$ref` under two branches does the same with a deeply nested value.
//! Without `$ref` a check visits each subschema at most once per node of the
//! value, so every such blow-up passes through references. Two guards:
//!
//! - **At arrival** ([`check_shape`]): a schema is refused when its text passes
//!   [`MAX_SCHEMA_BYTES`], it nests deeper than [`MAX_SCHEMA_DEPTH`], one
//!   `anyOf`/`oneOf`/`allOf` has more than [`MAX_BRANCHES`] branches, or its
//!   local `$ref`s expand to more than [`MAX_EXPANDED_REFS`] reference visits.
//! - **While checking** ([`BudgetedSchema::check`]): every reference the check
//!   follows costs a step, and a check stops when its steps
//!   ([`SchemaBudget::steps`], default 1,000,000) or its time
//!   ([`SchemaBudget::time`], default 1 s) run out, or when its run is cancelled.
//!
//! The steps are counted by a keyword of the host's, placed beside every
//! `$ref` (inside an `allOf` of its own, which the checker evaluates before
//! following the reference; in drafts 4 to 7, where siblings of `$ref` are
//! ignored, the reference and the counter are wrapped together). A check out
//! of budget unwinds from that keyword to [`BudgetedSchema::check`], which
//! catches only its own marker: the checker keeps no state across checks, and
//! the panic hook is not called.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// The longest schema text accepted. Default: 256 KiB.
pub const MAX_SCHEMA_BYTES: usize = 256 << 10;

/// The deepest nesting of JSON in a schema. Default: 64.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The most branches of one `anyOf`, `oneOf` or `allOf`. Default: 64.
pub const MAX_BRANCHES: usize = 64;

/// The most reference visits a schema's local `$ref`s expand to, counting each
/// reference as often as the schema reaches it (a recursive reference once).
/// Default: 100,000.
pub const MAX_EXPANDED_REFS: u64 = 100_000;

/// The host's counting keyword; a schema that uses the name itself is refused.
const STEP_KEYWORD: &str = "x-codeact-step";

/// The keywords whose values are data, not subschemas.
const DATA_KEYWORDS: [&str; 4] = ["const", "enum", "default", "examples"];

/// The reference keywords of every draft.
const REFERENCES: [&str; 3] = ["$ref", "$dynamicRef", "$recursiveRef"];

/// What one check may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaBudget {
    /// References followed. Default: 1,000,000.
    pub steps: u64,
    /// Time. Default: 1 s.
    pub time: Duration,
}

impl Default for SchemaBudget {
    fn default() -> Self {
        Self {
            steps: 1_000_000,
            time: Duration::from_secs(1),
        }
    }
}

/// The answer of one budgeted check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SchemaCheck {
    /// The value matches.
    Valid,
    /// It does not: the first errors (instance path and message), and how many
    /// there were in all.
    Invalid { shown: Vec<String>, total: usize },
    /// The check stopped before it knew: why (steps, time or a cancel).
    Stopped(String),
}

/// A schema compiled with the step counter in place.
#[derive(Debug)]
pub(crate) struct BudgetedSchema {
    validator: jsonschema::Validator,
}

impl BudgetedSchema {
    /// Checks `schema`'s shape ([`check_shape`]) and compiles it with the
    /// counter beside each reference.
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        check_shape(schema)?;
        let mut counted = schema.clone();
        let legacy = is_legacy_draft(schema);
        count_references(&mut counted, legacy);
        let validator = jsonschema::options()
            .with_keyword(STEP_KEYWORD, |_, _, _| Ok(Box::new(Step)))
            .build(&counted)
            .map_err(|e| e.to_string())?;
        Ok(Self { validator })
    }

    /// Checks `instance`, keeping the first `max_errors` errors, within `budget`;
    /// a cancelled `cancel` stops it at its next reference.
    pub(crate) fn check(
        &self,
        instance: &Value,
        budget: SchemaBudget,
        cancel: Option<&CancellationToken>,
        max_errors: usize,
    ) -> SchemaCheck {
        let meter = Meter {
            left: Cell::new(budget.steps),
            until: Instant::now() + budget.time,
            cancel: cancel.cloned(),
        };
        let previous = METER.with(|current| current.replace(Some(meter)));
        let checked = catch_unwind(AssertUnwindSafe(|| {
            if self.validator.is_valid(instance) {
                return SchemaCheck::Valid;
            }
            let mut shown = Vec::new();
            let mut total = 0;
            for error in self.validator.iter_errors(instance) {
                total += 1;
                if shown.len() < max_errors {
                    let at = error.instance_path().as_str();
                    let at = if at.is_empty() { "the top level" } else { at };
                    shown.push(format!("at {at}: {error}"));
                }
            }
            SchemaCheck::Invalid { shown, total }
        }));
        METER.with(|current| current.replace(previous));
        match checked {
            Ok(answer) => answer,
            Err(payload) => match payload.downcast::<Stop>() {
                Ok(stop) => SchemaCheck::Stopped(stop.reason(budget)),
                Err(other) => resume_unwind(other),
            },
        }
    }
}

#[cfg(feature = "mcp")]
impl BudgetedSchema {
    /// The first place `value` breaks the schema, as `at /path: message` (`at
    /// the top level: …`), or why the check stopped, within the default budget.
    pub(crate) fn first_error(&self, value: &Value) -> Result<(), String> {
        match self.check(value, SchemaBudget::default(), None, 1) {
            SchemaCheck::Valid => Ok(()),
            SchemaCheck::Invalid { shown, .. } => Err(shown.into_iter().next().unwrap_or_default()),
            SchemaCheck::Stopped(why) => Err(format!("(not known: {why})")),
        }
    }
}

/// Refuses a schema that is too large, too deep, too wide, or whose references
/// expand too far (see the module docs), naming which.
pub fn check_shape(schema: &Value) -> Result<(), String> {
    let bytes = codeact_runtime::text::json_len(schema);
    if bytes > MAX_SCHEMA_BYTES as u64 {
        return Err(format!(
            "the schema is {bytes} bytes; at most {MAX_SCHEMA_BYTES} are accepted"
        ));
    }
    walk_shape(schema, 0)?;
    let expanded = ExpandedRefs::new(schema).count(schema)?;
    if expanded > MAX_EXPANDED_REFS {
        return Err(format!(
            "the schema's $refs expand to more than {MAX_EXPANDED_REFS} references to follow; \
             share fewer definitions between branches"
        ));
    }
    Ok(())
}

fn walk_shape(value: &Value, depth: usize) -> Result<(), String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "the schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    match value {
        Value::Object(map) => {
            if map.contains_key(STEP_KEYWORD) {
                return Err(format!(
                    "the schema uses the reserved keyword '{STEP_KEYWORD}'"
                ));
            }
            for (key, child) in map {
                if matches!(key.as_str(), "anyOf" | "oneOf" | "allOf")
                    && child
                        .as_array()
                        .is_some_and(|branches| branches.len() > MAX_BRANCHES)
                {
                    return Err(format!(
                        "one '{key}' of the schema has more than {MAX_BRANCHES} branches"
                    ));
                }
                walk_shape(child, depth + 1)?;
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .try_for_each(|item| walk_shape(item, depth + 1)),
        _ => Ok(()),
    }
}

/// Counts the reference visits of a schema's local `$ref`s (`#/…` pointers and
/// `#`), each target's count memoised; a reference back into a target being
/// counted (recursion) counts once, as the value's own depth bounds it.
struct ExpandedRefs<'a> {
    root: &'a Value,
    memo: std::collections::HashMap<String, u64>,
    open: std::collections::HashSet<String>,
}

impl<'a> ExpandedRefs<'a> {
    fn new(root: &'a Value) -> Self {
        Self {
            root,
            memo: std::collections::HashMap::new(),
            open: std::collections::HashSet::new(),
        }
    }

    fn count(&mut self, value: &'a Value) -> Result<u64, String> {
        match value {
            Value::Object(map) => {
                let mut total: u64 = 0;
                for (key, child) in map {
                    if DATA_KEYWORDS.contains(&key.as_str()) {
                        continue;
                    }
                    if key == "$ref"
                        && let Some(pointer) = child.as_str()
                    {
                        total = total
                            .saturating_add(1)
                            .saturating_add(self.target(pointer)?);
                    } else {
                        total = total.saturating_add(self.count(child)?);
                    }
                    if total > MAX_EXPANDED_REFS {
                        return Ok(total);
                    }
                }
                Ok(total)
            }
            Value::Array(items) => {
                let mut total: u64 = 0;
                for item in items {
                    total = total.saturating_add(self.count(item)?);
                    if total > MAX_EXPANDED_REFS {
                        return Ok(total);
                    }
                }
                Ok(total)
            }
            _ => Ok(0),
        }
    }

    /// The references reached through `pointer`'s target; 0 for a reference
    /// that is not local (the checker resolves no remote ones) or is recursive.
    fn target(&mut self, pointer: &str) -> Result<u64, String> {
        let Some(path) = pointer.strip_prefix('#') else {
            return Ok(0);
        };
        if path.is_empty() || path.starts_with('/') {
            if let Some(&known) = self.memo.get(path) {
                return Ok(known);
            }
            if !self.open.insert(path.to_string()) {
                return Ok(0);
            }
            let target = if path.is_empty() {
                Some(self.root)
            } else {
                self.root.pointer(path)
            };
            let counted = match target {
                Some(target) => self.count(target)?,
                None => 0,
            };
            self.open.remove(path);
            self.memo.insert(path.to_string(), counted);
            return Ok(counted);
        }
        Ok(0)
    }
}

/// Drafts 4 to 7 ignore the siblings of `$ref`.
fn is_legacy_draft(schema: &Value) -> bool {
    schema
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|uri| {
            ["draft-03", "draft-04", "draft-06", "draft-07"]
                .iter()
                .any(|d| uri.contains(d))
        })
}

/// Places the counting keyword so that it runs before each reference is
/// followed (see the module docs).
fn count_references(value: &mut Value, legacy: bool) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if !DATA_KEYWORDS.contains(&key.as_str()) {
                    count_references(child, legacy);
                }
            }
            let refers = REFERENCES
                .iter()
                .any(|keyword| map.get(*keyword).is_some_and(Value::is_string));
            if !refers {
                return;
            }
            let step = json!({ STEP_KEYWORD: true });
            if legacy {
                // Kept outside, so pointers to definitions still resolve.
                let mut outer = Map::new();
                for kept in ["definitions", "$defs", "$id", "id", "$schema"] {
                    if let Some(value) = map.remove(kept) {
                        outer.insert(kept.to_string(), value);
                    }
                }
                let inner = std::mem::take(map);
                outer.insert("allOf".into(), json!([step, Value::Object(inner)]));
                *map = outer;
            } else {
                match map.get_mut("allOf") {
                    Some(Value::Array(all)) => all.push(step),
                    _ => {
                        map.insert("allOf".into(), json!([step]));
                    }
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| count_references(item, legacy)),
        _ => {}
    }
}

/// The running check's allowance, on its thread.
struct Meter {
    left: Cell<u64>,
    until: Instant,
    cancel: Option<CancellationToken>,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// Why a check stopped, carried by the unwind from [`Step`].
#[derive(Debug)]
enum Stop {
    Steps,
    Time,
    Cancelled,
}

impl Stop {
    fn reason(&self, budget: SchemaBudget) -> String {
        match self {
            Self::Steps => format!(
                "the schema check followed {} references without an answer, its limit",
                budget.steps
            ),
            Self::Time => format!(
                "the schema check ran for {} ms without an answer, its limit",
                budget.time.as_millis()
            ),
            Self::Cancelled => "the run was cancelled during the schema check".into(),
        }
    }
}

/// One reference about to be followed: spends a step, and every 256 steps
/// looks at the clock and the cancel.
fn step() {
    let stop = METER.with(|current| {
        let meter = current.take()?;
        let left = meter.left.get();
        let stop = if left == 0 {
            Some(Stop::Steps)
        } else {
            meter.left.set(left - 1);
            if left % 256 == 0 {
                if meter
                    .cancel
                    .as_ref()
                    .is_some_and(CancellationToken::is_cancelled)
                {
                    Some(Stop::Cancelled)
                } else if Instant::now() >= meter.until {
                    Some(Stop::Time)
                } else {
                    None
                }
            } else {
                None
            }
        };
        current.set(Some(meter));
        stop
    });
    if let Some(stop) = stop {
        resume_unwind(Box::new(stop));
    }
}

/// The counting keyword: always valid, it only spends.
struct Step;

impl<'i> jsonschema::Keyword<'i> for Step {
    fn validate(&self, _: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        step();
        Ok(())
    }

    fn is_valid(&self, _: &'i Value) -> bool {
        step();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forty definitions, each naming the next twice under `anyOf`: ~2^40
    /// reference visits for a value that matches none.
    fn doubling_schema(levels: usize) -> Value {
        let mut defs = Map::new();
        for i in 0..levels {
            let next = if i + 1 == levels {
                json!({"type": "string"})
            } else {
                json!({"$ref": format!("#/$defs/a{}", i + 1)})
            };
            defs.insert(format!("a{i}"), json!({"anyOf": [next.clone(), next]}));
        }
        json!({"$defs": Value::Object(defs), "$ref": "#/$defs/a0"})
    }

    /// The same blow-up through recursion: two branches that each recurse into
    /// the items, with a value nested `depth` arrays deep.
    fn recursive_schema_and_value(depth: usize) -> (Value, Value) {
        let schema = json!({
            "$defs": {"node": {"anyOf": [
                {"type": "array", "items": {"$ref": "#/$defs/node"}},
                {"type": "array", "items": {"$ref": "#/$defs/node"}},
            ]}},
            "$ref": "#/$defs/node"
        });
        let mut value = json!(1);
        for _ in 0..depth {
            value = json!([value]);
        }
        (schema, value)
    }

    #[test]
    fn a_schema_whose_references_double_forty_times_is_refused_when_it_arrives() {
        let schema = doubling_schema(40);
        assert!(schema.to_string().len() < 3000);
        let refused = check_shape(&schema).expect_err("refused");
        assert!(refused.contains("expand to more than"), "{refused}");
        assert!(check_shape(&doubling_schema(8)).is_ok());
    }

    #[test]
    fn a_check_that_would_take_exponential_time_stops_at_its_step_limit() {
        let (schema, value) = recursive_schema_and_value(40);
        let compiled = BudgetedSchema::compile(&schema).expect("an acceptable shape");
        let started = Instant::now();
        let budget = SchemaBudget {
            steps: 100_000,
            time: Duration::from_secs(60),
        };
        let answer = compiled.check(&value, budget, None, 5);
        assert!(
            matches!(&answer, SchemaCheck::Stopped(reason) if reason.contains("100000 references")),
            "{answer:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_check_stops_at_its_time_limit_and_at_a_cancel() {
        let (schema, value) = recursive_schema_and_value(60);
        let compiled = BudgetedSchema::compile(&schema).expect("an acceptable shape");
        let budget = SchemaBudget {
            steps: u64::MAX,
            time: Duration::from_millis(200),
        };
        let started = Instant::now();
        let answer = compiled.check(&value, budget, None, 5);
        assert!(
            matches!(&answer, SchemaCheck::Stopped(reason) if reason.contains("200 ms")),
            "{answer:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));

        let cancel = CancellationToken::new();
        cancel.cancel();
        let budget = SchemaBudget {
            steps: u64::MAX,
            time: Duration::from_secs(60),
        };
        let answer = compiled.check(&value, budget, Some(&cancel), 5);
        assert!(
            matches!(&answer, SchemaCheck::Stopped(reason) if reason.contains("cancelled")),
            "{answer:?}"
        );
    }

    #[test]
    fn counted_schemas_still_accept_and_refuse_as_the_plain_ones_do() {
        let cases = [
            // A recursive tree, a draft-7 reference with ignored siblings, a
            // reference beside its own allOf, and a reference to the root.
            (
                json!({"$defs": {"tree": {"type": "object", "properties": {
                    "children": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}},
                    "$ref": "#/$defs/tree"}),
                vec![
                    json!({"children": [{"children": []}]}),
                    json!({"children": [1]}),
                ],
            ),
            (
                json!({"$schema": "http://json-schema.org/draft-07/schema#",
                    "definitions": {"n": {"type": "number"}},
                    "properties": {"a": {"$ref": "#/definitions/n", "type": "string"}}}),
                vec![json!({"a": 1}), json!({"a": "x"})],
            ),
            (
                json!({"$defs": {"n": {"type": "number"}},
                    "properties": {"a": {"$ref": "#/$defs/n", "allOf": [{"minimum": 3}]}}}),
                vec![json!({"a": 4}), json!({"a": 2}), json!({"a": "x"})],
            ),
            (
                json!({"type": ["object", "integer"], "properties": {"next": {"$ref": "#"}}}),
                vec![json!({"next": {"next": 3}}), json!({"next": "x"})],
            ),
        ];
        for (schema, values) in cases {
            let plain = jsonschema::validator_for(&schema).expect("compiles");
            let counted = BudgetedSchema::compile(&schema).expect("compiles");
            for value in values {
                let answer = counted.check(&value, SchemaBudget::default(), None, 5);
                let expected_errors: Vec<String> =
                    plain.iter_errors(&value).map(|e| e.to_string()).collect();
                match answer {
                    SchemaCheck::Valid => assert!(plain.is_valid(&value), "{schema} {value}"),
                    SchemaCheck::Invalid { shown, total } => {
                        assert!(!plain.is_valid(&value), "{schema} {value}");
                        assert_eq!(total, expected_errors.len(), "{schema} {value} {shown:?}");
                    }
                    SchemaCheck::Stopped(reason) => panic!("{reason}"),
                }
            }
        }
    }

    #[test]
    fn shapes_past_each_bound_are_refused_naming_the_bound() {
        let mut deep = json!({"type": "string"});
        for _ in 0..70 {
            deep = json!({"items": deep});
        }
        assert!(check_shape(&deep).expect_err("deep").contains("deeper"));
        let wide = json!({"anyOf": vec![json!({"type": "string"}); 65]});
        assert!(check_shape(&wide).expect_err("wide").contains("branches"));
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(check_shape(&big).expect_err("big").contains("bytes"));
        let reserved = json!({STEP_KEYWORD: 1});
        assert!(
            check_shape(&reserved)
                .expect_err("reserved")
                .contains("reserved")
        );
    }
}
