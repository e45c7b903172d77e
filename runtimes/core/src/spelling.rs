//! How a language writes a tool's parameter names in a call, so that what a
//! model is shown is callable as shown.
//!
//! A schema may name a parameter with a keyword of the script's language
//! (`from`, `class`, `fn`) or with something that is no identifier at all
//! (`max-results`). Each runtime reports its language's rule as a [`Spelling`]
//! ([`Runtime::spelling`](crate::Runtime::spelling)); the rule lives in the
//! runtime's crate, beside the rest of what it knows about its language. A name
//! is then written one of three ways ([`Written`]): as it is, as a string key
//! (JavaScript's `{"max-results": 5}`, Rhai's `#{"fn": 1}`: the key is still the
//! schema's name), or under another identifier (Python's `from_`), which
//! [`ToolSpec::arguments_from_script`] maps back to the schema's name before the
//! call reaches the tool.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::{ToolDispatch, ToolError, ToolSpec};

/// How one language writes one parameter name as a named argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// As it is: the language takes it there as an identifier.
    AsIs,
    /// As a string key (the name's JSON string), which the language takes for
    /// a key of the arguments' object; the key a call brings is the name itself.
    Quoted,
    /// As this other identifier, which the host maps back to the schema's name.
    Respelled(String),
}

/// A language's rule for writing parameter names in a call: what a runtime
/// reports through [`Runtime::spelling`](crate::Runtime::spelling) and what the
/// signatures, the host's messages and the mapping back of a call's arguments use.
#[derive(Debug, Clone, Copy)]
pub struct Spelling {
    /// The language, for messages (`"Python"`).
    pub language: &'static str,
    /// How the language writes a name (never called with an empty one, or one
    /// longer than [`MAX_WRITTEN_NAME`]: those are always [`Written::Quoted`]).
    pub rule: fn(&str) -> Written,
}

/// The longest name a signature shows whole: a longer one (a third party's
/// schema can hold anything) is shown cut, as a JSON string, and cannot be
/// written in a call by name. 64 characters.
pub const MAX_WRITTEN_NAME: usize = 64;

/// How many `_` a respelled name may gain to differ from every other parameter
/// (Python's `from_` when the schema also has `from_` becomes `from__`) before
/// it is given up and shown quoted instead: a schema cannot make the spelling
/// slow with a chain of such names. 8.
const MAX_EXTRA_UNDERSCORES: usize = 8;

impl Default for Spelling {
    fn default() -> Self {
        Self::JSON
    }
}

impl Spelling {
    /// Names as JSON Schema and most documentation write them: a plain one
    /// (ASCII letters, digits, `_`, `-`) as it is, any other quoted. What a
    /// runtime that reports no spelling of its own uses.
    pub const JSON: Spelling = Spelling {
        language: "JSON",
        rule: json_rule,
    };

    /// JavaScript's, shared by every JavaScript engine (Boa, QuickJS): the key of
    /// an object literal may be any identifier name, keywords included
    /// (`{from: 1, class: 2}`), so an ASCII identifier name (letters, digits, `_`,
    /// `$`, not starting with a digit) is written as it is and anything else
    /// (`max-results`, `2fa`) as a string key (`{"max-results": 5}`).
    pub const JAVASCRIPT: Spelling = Spelling {
        language: "JavaScript",
        rule: javascript_rule,
    };

    /// How this language writes `name`, with the limits every language shares
    /// (see [`Spelling::rule`]).
    pub fn write(&self, name: &str) -> Written {
        if name.is_empty() || name.chars().count() > MAX_WRITTEN_NAME {
            return Written::Quoted;
        }
        (self.rule)(name)
    }
}

fn json_rule(name: &str) -> Written {
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Written::AsIs
    } else {
        Written::Quoted
    }
}

fn javascript_rule(name: &str) -> Written {
    let mut chars = name.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$');
    if first && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
        Written::AsIs
    } else {
        Written::Quoted
    }
}

/// One parameter as a call in some language writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenName {
    /// The schema's name.
    pub name: String,
    /// As a signature shows it: safe in a prompt (a quoted name is a JSON string
    /// whose markup characters are `\u` escapes, cut at [`MAX_WRITTEN_NAME`]).
    pub shown: String,
    /// The key a call written as shown brings, when it is not the schema's name
    /// (a respelled name); `None` otherwise.
    pub respelled: Option<String>,
}

impl ToolSpec {
    /// `names` (schema names, in the order a signature lists them) as `spelling`
    /// writes them. A respelled name that would be another parameter's name, or
    /// another's respelling, gains `_` until it is neither (at most 8, then it is
    /// shown quoted); the order decides, so the same schema is always written
    /// the same way.
    pub fn written_names<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        spelling: &Spelling,
    ) -> Vec<WrittenName> {
        let properties = self.parameters.get("properties").and_then(Value::as_object);
        let taken = |candidate: &str| properties.is_some_and(|p| p.contains_key(candidate));
        let mut respellings: HashSet<String> = HashSet::new();
        names
            .into_iter()
            .map(|name| {
                let quoted = || WrittenName {
                    name: name.to_string(),
                    shown: crate::tools::quoted_name(name),
                    respelled: None,
                };
                match spelling.write(name) {
                    Written::AsIs => WrittenName {
                        name: name.to_string(),
                        shown: name.to_string(),
                        respelled: None,
                    },
                    Written::Quoted => quoted(),
                    Written::Respelled(mut respelled) => {
                        let mut extra = 0;
                        while taken(&respelled) || respellings.contains(&respelled) {
                            if extra == MAX_EXTRA_UNDERSCORES {
                                return quoted();
                            }
                            respelled.push('_');
                            extra += 1;
                        }
                        respellings.insert(respelled.clone());
                        WrittenName {
                            name: name.to_string(),
                            shown: respelled.clone(),
                            respelled: Some(respelled),
                        }
                    }
                }
            })
            .collect()
    }

    /// Every parameter whose key a call written in `spelling` differs from the
    /// schema's name: respelled key → schema name. Empty for a language that
    /// writes every name as it is or quoted.
    pub fn respellings(&self, spelling: &Spelling) -> BTreeMap<String, String> {
        let names = self.argument_names();
        self.written_names(names.iter().map(|(name, _)| name.as_str()), spelling)
            .into_iter()
            .filter_map(|written| written.respelled.map(|key| (key, written.name)))
            .collect()
    }

    /// `args` as the tool expects them: each key a call written in `spelling`
    /// brings for a respelled parameter (Python's `from_`) renamed to the schema's
    /// name (`from`), unless the call also gave that name. Anything else, and
    /// arguments that are not an object, are left as they are.
    pub fn arguments_from_script(&self, args: Value, spelling: &Spelling) -> Value {
        let respellings = self.respellings(spelling);
        map_back(args, &respellings)
    }

    /// Checks a call's argument names against the schema before the tool runs: a
    /// required parameter left out, or a name the schema does not list, is a tool
    /// error naming both what was wrong and what is expected, each parameter as
    /// `spelling` writes it: "unknown argument `to_`; missing required `to`; the
    /// parameters are amount, from (written from_), to".
    ///
    /// Names the schema does not list are refused when it lists `properties` and
    /// admits no others: no `patternProperties`, and `additionalProperties`
    /// absent or `false` (a tool that takes other names says so with
    /// `additionalProperties`). Without `properties` nothing is checked, nor are
    /// arguments that are not an object (`null` counts as no arguments). Each
    /// argument costs one lookup; the message names at most 8 wrong names and
    /// [`MAX_SIGNATURE_FIELDS`](crate::tools::MAX_SIGNATURE_FIELDS) parameters,
    /// so a schema of thousands of properties or a call of thousands of names
    /// stays cheap.
    pub fn check_argument_names(&self, args: &Value, spelling: &Spelling) -> Result<(), ToolError> {
        let Some(properties) = self.parameters.get("properties").and_then(Value::as_object) else {
            return Ok(());
        };
        let empty = Map::new();
        let given = match args {
            Value::Object(given) => given,
            Value::Null => &empty,
            _ => return Ok(()),
        };
        let others_allowed = self.parameters.get("patternProperties").is_some()
            || self
                .parameters
                .get("additionalProperties")
                .is_some_and(|allowed| allowed != &Value::Bool(false));
        let unknown: Vec<&String> = if others_allowed {
            Vec::new()
        } else {
            given
                .keys()
                .filter(|key| !properties.contains_key(*key))
                .collect()
        };
        let missing: Vec<&str> = self
            .required_names()
            .into_iter()
            .filter(|name| properties.contains_key(*name) && !given.contains_key(*name))
            .collect();
        if unknown.is_empty() && missing.is_empty() {
            return Ok(());
        }
        const NAMED: usize = 8;
        let mut parts = Vec::new();
        if !unknown.is_empty() {
            let mut listed: Vec<String> = unknown
                .iter()
                .take(NAMED)
                .map(|key| format!("`{}`", crate::tools::shown_name(key)))
                .collect();
            if unknown.len() > NAMED {
                listed.push(format!("and {} more", unknown.len() - NAMED));
            }
            let noun = if unknown.len() == 1 {
                "argument"
            } else {
                "arguments"
            };
            parts.push(format!("unknown {noun} {}", listed.join(", ")));
        }
        if !missing.is_empty() {
            let written = self.written_names(missing.iter().take(NAMED).copied(), spelling);
            let mut listed: Vec<String> = written
                .iter()
                .map(|name| format!("`{}`", name.shown))
                .collect();
            if missing.len() > NAMED {
                listed.push(format!("and {} more", missing.len() - NAMED));
            }
            parts.push(format!("missing required {}", listed.join(", ")));
        }
        let names = self.argument_names();
        let shown: Vec<String> = self
            .written_names(
                names
                    .iter()
                    .take(crate::tools::MAX_SIGNATURE_FIELDS)
                    .map(|(name, _)| name.as_str()),
                spelling,
            )
            .into_iter()
            .map(|name| {
                if name.respelled.is_some() {
                    format!(
                        "{} (written {})",
                        crate::tools::shown_name(&name.name),
                        name.shown
                    )
                } else {
                    name.shown
                }
            })
            .collect();
        let mut list = shown.join(", ");
        if names.len() > crate::tools::MAX_SIGNATURE_FIELDS {
            list.push_str(", …");
        }
        parts.push(if shown.is_empty() {
            "it takes no arguments".to_string()
        } else {
            format!("the parameters are {list}")
        });
        Err(ToolError::new(parts.join("; ")))
    }
}

fn map_back(args: Value, respellings: &BTreeMap<String, String>) -> Value {
    let Value::Object(given) = args else {
        return args;
    };
    if respellings.is_empty() || !given.keys().any(|key| respellings.contains_key(key)) {
        return Value::Object(given);
    }
    let named: HashSet<String> = given.keys().cloned().collect();
    given
        .into_iter()
        .map(|(key, value)| match respellings.get(&key) {
            Some(name) if !named.contains(name) => (name.clone(), value),
            _ => (key, value),
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// A tool dispatch whose calls' arguments are mapped back to the schemas' names
/// ([`ToolSpec::arguments_from_script`]) before they reach `inner`: what a
/// runtime whose language respells names (Python) puts between its scripts and
/// the host's tools. Each tool's respellings are worked out once, when the
/// dispatch is made.
pub struct SpelledTools {
    inner: Arc<dyn ToolDispatch>,
    respellings: BTreeMap<String, BTreeMap<String, String>>,
}

impl SpelledTools {
    /// `inner`'s tools, called as `spelling` writes their parameters.
    pub fn new(inner: Arc<dyn ToolDispatch>, spelling: &Spelling) -> Self {
        let respellings = inner
            .specs()
            .iter()
            .map(|spec| (spec.name.clone(), spec.respellings(spelling)))
            .filter(|(_, respellings)| !respellings.is_empty())
            .collect();
        Self { inner, respellings }
    }

    /// `inner` itself when no tool has a respelled parameter, else `inner` behind
    /// a [`SpelledTools`].
    pub fn wrap(inner: Arc<dyn ToolDispatch>, spelling: &Spelling) -> Arc<dyn ToolDispatch> {
        let spelled = Self::new(inner, spelling);
        if spelled.respellings.is_empty() {
            spelled.inner
        } else {
            Arc::new(spelled)
        }
    }
}

impl ToolDispatch for SpelledTools {
    fn specs(&self) -> &[ToolSpec] {
        self.inner.specs()
    }

    fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        self.inner.call(name, self.mapped(name, args))
    }

    fn call_many(&self, calls: Vec<crate::ToolCall>) -> Vec<Result<Value, ToolError>> {
        let calls = calls
            .into_iter()
            .map(|call| {
                let args = self.mapped(&call.name, call.args);
                crate::ToolCall::new(call.name, args)
            })
            .collect();
        self.inner.call_many(calls)
    }

    fn is_immediate(&self, name: &str) -> bool {
        self.inner.is_immediate(name)
    }
}

impl SpelledTools {
    /// `args` with `name`'s respelled parameters under their schema names.
    fn mapped(&self, name: &str, args: Value) -> Value {
        match self.respellings.get(name) {
            Some(respellings) => map_back(args, respellings),
            None => args,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A made-up language that respells `from` as `from_`, for the shared parts.
    const TRAILING: Spelling = Spelling {
        language: "Test",
        rule: |name| {
            if name == "from" || name == "class" {
                Written::Respelled(format!("{name}_"))
            } else if name.contains('-') {
                Written::Respelled(name.replace('-', "_"))
            } else {
                Written::AsIs
            }
        },
    };

    fn convert() -> ToolSpec {
        ToolSpec::new("convert", "").with_parameters(json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from": {"type": "string"},
                "to": {"type": "string"},
            },
            "required": ["amount", "from", "to"],
        }))
    }

    #[test]
    fn a_wrong_call_names_the_wrong_and_the_expected_names_as_the_language_writes_them() {
        let spec = convert();
        let args = spec.arguments_from_script(
            json!({"amount": 50, "from_": "EUR", "to_": "USD"}),
            &TRAILING,
        );
        assert_eq!(args, json!({"amount": 50, "from": "EUR", "to_": "USD"}));
        let err = spec
            .check_argument_names(&args, &TRAILING)
            .expect_err("refused");
        assert_eq!(
            err.message,
            "unknown argument `to_`; missing required `to`; the parameters are amount, from (written from_), to"
        );
        assert!(
            spec.check_argument_names(&json!({"amount": 1, "from": "a", "to": "b"}), &TRAILING)
                .is_ok()
        );
    }

    #[test]
    fn a_respelling_that_takes_another_parameters_name_gains_an_underscore() {
        let spec = ToolSpec::new("t", "").with_parameters(json!({
            "type": "object",
            "properties": {"from": {}, "from_": {}, "max-results": {}, "max_results": {}},
            "required": ["from"],
        }));
        let respellings = spec.respellings(&TRAILING);
        assert_eq!(respellings["from__"], "from");
        assert_eq!(respellings["max_results_"], "max-results");
        assert_eq!(respellings.len(), 2, "{respellings:?}");
        let args = spec.arguments_from_script(json!({"from__": 1, "from_": 2}), &TRAILING);
        assert_eq!(args, json!({"from": 1, "from_": 2}));
    }

    #[test]
    fn a_call_that_gives_both_names_keeps_both_and_the_tool_sees_the_schemas_one() {
        let spec = convert();
        let args = spec.arguments_from_script(json!({"from": "EUR", "from_": "USD"}), &TRAILING);
        assert_eq!(args, json!({"from": "EUR", "from_": "USD"}));
    }

    #[test]
    fn a_chain_of_underscored_names_gives_up_respelling_instead_of_growing() {
        let mut properties = serde_json::Map::new();
        for n in 0..=MAX_EXTRA_UNDERSCORES + 1 {
            properties.insert(format!("from{}", "_".repeat(n)), json!({}));
        }
        let spec = ToolSpec::new("t", "")
            .with_parameters(json!({"type": "object", "properties": properties}));
        let written = spec.written_names(["from"], &TRAILING);
        assert_eq!(written[0].shown, r#""from""#);
        assert_eq!(written[0].respelled, None);
    }

    #[test]
    fn no_schema_a_schema_admitting_other_names_or_arguments_not_an_object_are_not_checked() {
        let odd = json!({"anything": 1});
        assert!(
            ToolSpec::new("t", "")
                .check_argument_names(&odd, &TRAILING)
                .is_ok()
        );
        for extra in [
            json!({"additionalProperties": true}),
            json!({"additionalProperties": {"type": "string"}}),
            json!({"patternProperties": {"^x": {}}}),
        ] {
            let mut parameters = json!({"type": "object", "properties": {"a": {}}});
            parameters
                .as_object_mut()
                .expect("an object")
                .extend(extra.as_object().expect("an object").clone());
            let spec = ToolSpec::new("t", "").with_parameters(parameters);
            assert!(
                spec.check_argument_names(&odd, &TRAILING).is_ok(),
                "{extra}"
            );
        }
        let strict = ToolSpec::new("t", "").with_parameters(json!({
            "type": "object", "properties": {"a": {}}, "additionalProperties": false,
        }));
        assert!(strict.check_argument_names(&odd, &TRAILING).is_err());
        assert!(
            strict
                .check_argument_names(&json!("a.csv"), &TRAILING)
                .is_ok()
        );
        assert!(strict.check_argument_names(&Value::Null, &TRAILING).is_ok());
        let required = convert();
        let err = required
            .check_argument_names(&Value::Null, &TRAILING)
            .expect_err("refused");
        assert!(
            err.message
                .starts_with("missing required `amount`, `from_`, `to`"),
            "{}",
            err.message
        );
    }

    /// A schema of thousands of properties and a call of thousands of odd,
    /// huge names: the check and the mapping stay fast and the message short.
    #[test]
    fn huge_schemas_and_huge_or_odd_names_keep_the_check_fast_and_its_message_short() {
        let properties: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        let required: Vec<String> = (0..20_000).map(|i| format!("p{i}")).collect();
        let spec = ToolSpec::new("wide", "").with_parameters(json!({
            "type": "object", "properties": properties, "required": required,
        }));
        let given: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("{}`\n<{i}>", "x".repeat(300)), json!(i)))
            .collect();
        let args = Value::Object(given);
        let started = std::time::Instant::now();
        let mapped = spec.arguments_from_script(args, &TRAILING);
        let err = spec
            .check_argument_names(&mapped, &TRAILING)
            .expect_err("refused");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        eprintln!("checked in {:?}", started.elapsed());
        assert!(err.message.len() < 2_000, "{} bytes", err.message.len());
        assert!(!err.message.contains('\n'), "{}", err.message);
        assert!(err.message.contains("and 19992 more"), "{}", err.message);
    }
}
