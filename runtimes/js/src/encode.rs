//! Values written as JSON in Rust, with the JavaScript encoder's rules
//! (`codeact_runtime::JS_ENCODER`, which the prelude loads): own enumerable
//! string keys in `Object.keys` order, each read once as the encoder reads it
//! (an own getter runs), a `Date` its ISO string (`null` when invalid), a cycle
//! or a value nested past the limit an error naming its path in the encoder's
//! words. Lenient (tool arguments, printed values): `undefined`, functions and
//! symbols left out of objects and `null` in arrays and at the top, non-finite
//! numbers `null`. Strict (completion values): any of those is left to the
//! encoder, whose error names it.
//!
//! Why: interpreted by Boa, the encoder was most of a tool call's cost (a plain
//! `{a: i, b: 1}`) and a good part of a trivial step's; here the text is built
//! in one pass, calling no JavaScript a script could have replaced.
//!
//! What it does not decide it hands back ([`Encoded::Unsure`]), and the prelude
//! or the worker then runs the encoder on the whole value: a Proxy anywhere it
//! looks (whose traps decide what it is), a BigInt (the encoder's error quotes
//! it), a string with a lone surrogate, anything strict mode refuses, and an
//! array longer than Boa's loop-iteration limit (whose loop in the encoder ends
//! at that limit). A getter met before such a value so runs twice.

use boa_engine::builtins::object::OrdinaryObject;
use boa_engine::builtins::proxy::Proxy;
use boa_engine::object::builtins::{JsArray, JsDate};
use boa_engine::property::PropertyKey;
use boa_engine::value::JsVariant;
use boa_engine::{Context, JsObject, JsResult, JsString, JsValue, js_string};

/// What [`encode`] made of a value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Encoded {
    /// The JSON text.
    Json(String),
    /// An error in the encoder's words (a cycle, too deep), without its
    /// `TypeError: `.
    Refused(String),
    /// A value left to the JavaScript encoder.
    Unsure,
}

/// The rules of one encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The deepest nesting allowed (the top value is at depth 0).
    pub max_depth: usize,
    /// Tool arguments' rules (`true`) or completion values' (`false`).
    pub lenient: bool,
    /// What the value is called in errors: `args`, `output`.
    pub root: &'static str,
}

/// `value` as JSON text under `rules`, or why not; `Err` is an exception a
/// getter threw, as the encoder would have let it through.
pub(crate) fn encode(value: &JsValue, rules: Rules, context: &mut Context) -> JsResult<Encoded> {
    let mut walk = Walk {
        rules,
        max_items: context.runtime_limits().loop_iteration_limit(),
        path: Vec::new(),
        open: Vec::new(),
        out: String::new(),
    };
    match walk.value(value, 0, context) {
        Ok(()) => Ok(Encoded::Json(walk.out)),
        Err(Stop::Refused(message)) => Ok(Encoded::Refused(message)),
        Err(Stop::Unsure) => Ok(Encoded::Unsure),
        Err(Stop::Thrown(error)) => Err(error),
    }
}

/// A key on the way down, for an error's path.
enum Step {
    Key(String),
    Index(u64),
}

/// How a walk stopped early.
enum Stop {
    Refused(String),
    Unsure,
    Thrown(boa_engine::JsError),
}

impl From<boa_engine::JsError> for Stop {
    fn from(error: boa_engine::JsError) -> Self {
        Stop::Thrown(error)
    }
}

struct Walk {
    rules: Rules,
    /// Boa's loop-iteration limit: the encoder's loop over a longer array
    /// would end there, so such an array is left to it.
    max_items: u64,
    path: Vec<Step>,
    /// The objects being written, outermost first: meeting one again is a cycle.
    open: Vec<JsObject>,
    out: String,
}

/// A string as Rust text, or `Unsure` for one with a lone surrogate.
fn text_of(string: &JsString) -> Result<String, Stop> {
    string.to_std_string().map_err(|_| Stop::Unsure)
}

impl Walk {
    /// The path of the value being written, as the encoder writes it.
    fn path(&self) -> String {
        let mut text = String::from(self.rules.root);
        for step in &self.path {
            match step {
                Step::Key(key) => {
                    text.push('.');
                    text.push_str(key);
                }
                Step::Index(index) => {
                    text.push('[');
                    text.push_str(&index.to_string());
                    text.push(']');
                }
            }
        }
        text
    }

    /// Whether `value` is one JSON cannot hold as it is: `undefined`, a
    /// function or a symbol (left out of objects, or `null`, when lenient).
    fn unheld(value: &JsValue) -> bool {
        value.is_undefined() || value.is_symbol() || value.is_callable()
    }

    fn push_quoted(&mut self, text: &str) {
        // Writing a `&str` as JSON cannot fail.
        if let Ok(quoted) = serde_json::to_string(text) {
            self.out.push_str(&quoted);
        }
    }

    fn value(&mut self, value: &JsValue, depth: usize, context: &mut Context) -> Result<(), Stop> {
        if depth > self.rules.max_depth {
            return Err(Stop::Refused(format!(
                "{} is nested deeper than the nesting depth limit of {}",
                self.path(),
                self.rules.max_depth
            )));
        }
        match value.variant() {
            JsVariant::String(string) => {
                let text = text_of(&string)?;
                self.push_quoted(&text);
            }
            JsVariant::Boolean(true) => self.out.push_str("true"),
            JsVariant::Boolean(false) => self.out.push_str("false"),
            JsVariant::Integer32(number) => self.out.push_str(&number.to_string()),
            JsVariant::Float64(number) => {
                if !number.is_finite() {
                    if !self.rules.lenient {
                        return Err(Stop::Unsure);
                    }
                    self.out.push_str("null");
                } else if number == 0.0 {
                    // -0 too, as JSON.stringify writes it.
                    self.out.push('0');
                } else {
                    // The engine's own digits, as JSON.stringify writes them.
                    let digits = value.to_string(context)?;
                    self.out.push_str(&digits.to_std_string_escaped());
                }
            }
            JsVariant::Null => self.out.push_str("null"),
            JsVariant::Undefined | JsVariant::Symbol(_) => {
                if !self.rules.lenient {
                    return Err(Stop::Unsure);
                }
                self.out.push_str("null");
            }
            JsVariant::BigInt(_) => return Err(Stop::Unsure),
            JsVariant::Object(object) => {
                if object.is::<Proxy>() {
                    return Err(Stop::Unsure);
                }
                if object.is_callable() {
                    if !self.rules.lenient {
                        return Err(Stop::Unsure);
                    }
                    self.out.push_str("null");
                } else if let Some(time) = self.date_time(&object, context)? {
                    self.date(&object, time, context)?;
                } else if object.is_array() {
                    self.array(&object, depth, context)?;
                } else {
                    self.object(&object, depth, context)?;
                }
            }
        }
        Ok(())
    }

    /// The object's `Date` time, when its prototype chain holds the realm's
    /// `Date.prototype` (the encoder's `instanceof`) and it is a real `Date`
    /// (whose `getTime` the encoder calls). A Proxy on the chain (whose trap
    /// would run) is left to the encoder.
    fn date_time(&self, object: &JsObject, context: &mut Context) -> Result<Option<f64>, Stop> {
        let date_prototype = context.intrinsics().constructors().date().prototype();
        let mut link = object.prototype();
        while let Some(prototype) = link {
            if prototype.is::<Proxy>() {
                return Err(Stop::Unsure);
            }
            if prototype == date_prototype {
                let Ok(date) = JsDate::from_object(object.clone()) else {
                    // `Object.create(Date.prototype)`: an object, as for the
                    // encoder, whose `getTime` throws and is caught.
                    return Ok(None);
                };
                let time = date.get_time(context)?;
                return Ok(Some(time.as_number().unwrap_or(f64::NAN)));
            }
            link = prototype.prototype();
        }
        Ok(None)
    }

    fn date(&mut self, object: &JsObject, time: f64, context: &mut Context) -> Result<(), Stop> {
        if !time.is_finite() {
            self.out.push_str("null");
            return Ok(());
        }
        let date = JsDate::from_object(object.clone())?;
        let iso = date.to_iso_string(context)?;
        let text = iso.as_string().map(|s| text_of(&s)).transpose()?;
        match text {
            Some(text) => self.push_quoted(&text),
            None => return Err(Stop::Unsure),
        }
        Ok(())
    }

    /// Marks `object` open, or refuses a cycle.
    fn enter(&mut self, object: &JsObject) -> Result<(), Stop> {
        if self.open.iter().any(|open| open == object) {
            return Err(Stop::Refused(format!(
                "{} refers back to itself (a cycle), which JSON cannot hold",
                self.path()
            )));
        }
        self.open.push(object.clone());
        Ok(())
    }

    fn array(
        &mut self,
        object: &JsObject,
        depth: usize,
        context: &mut Context,
    ) -> Result<(), Stop> {
        let length = object.get(js_string!("length"), context)?;
        let length = length.as_number().unwrap_or(0.0);
        // An array's length is a whole number below 2^32.
        let length = if length > 0.0 { length as u64 } else { 0 };
        if length > self.max_items {
            return Err(Stop::Unsure);
        }
        self.enter(object)?;
        self.out.push('[');
        for index in 0..length {
            if index > 0 {
                self.out.push(',');
            }
            // Only what the array owns: a hole is not read through the
            // prototype.
            let key = PropertyKey::from(index);
            let item = if object.has_own_property(key.clone(), context)? {
                object.get(key, context)?
            } else {
                JsValue::undefined()
            };
            if self.rules.lenient && Self::unheld(&item) {
                self.out.push_str("null");
                continue;
            }
            self.path.push(Step::Index(index));
            self.value(&item, depth + 1, context)?;
            self.path.pop();
        }
        self.out.push(']');
        self.open.pop();
        Ok(())
    }

    fn object(
        &mut self,
        object: &JsObject,
        depth: usize,
        context: &mut Context,
    ) -> Result<(), Stop> {
        self.enter(object)?;
        self.out.push('{');
        // The realm's own `Object.keys`, not the global a script may replace.
        let keys = OrdinaryObject::keys(&JsValue::undefined(), &[object.clone().into()], context)?;
        let keys = keys.as_object().ok_or(Stop::Unsure)?;
        let count = JsArray::from_object(keys.clone())?.length(context)?;
        let mut first = true;
        for index in 0..count {
            // The list's own items: `Object.keys` made it just now.
            let key = keys.get(index, context)?;
            let Some(key) = key.as_string() else {
                return Err(Stop::Unsure);
            };
            let property = PropertyKey::from(key.clone());
            // A getter met earlier may have deleted it.
            if !object.has_own_property(property.clone(), context)? {
                continue;
            }
            let item = object.get(property, context)?;
            if self.rules.lenient && Self::unheld(&item) {
                continue;
            }
            let key = text_of(&key)?;
            if !first {
                self.out.push(',');
            }
            first = false;
            self.push_quoted(&key);
            self.out.push(':');
            self.path.push(Step::Key(key));
            self.value(&item, depth + 1, context)?;
            self.path.pop();
        }
        self.out.push('}');
        self.open.pop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use boa_engine::{Context, JsValue, Source};
    use codeact_runtime::Limits;
    use serde_json::Value;

    use super::{Encoded, Rules, encode};

    /// What the prelude's encoder makes of `value`: its text, or its error's
    /// message.
    fn by_the_encoder(
        encoder: &JsValue,
        value: &JsValue,
        rules: Rules,
        context: &mut Context,
    ) -> Result<String, String> {
        let encoder = encoder.as_callable().expect("the encoder is a function");
        let args = [
            value.clone(),
            JsValue::from(rules.max_depth as f64),
            JsValue::from(rules.lenient),
            JsValue::from(boa_engine::JsString::from(rules.root)),
        ];
        match encoder.call(&JsValue::undefined(), &args, context) {
            Ok(text) => Ok(text
                .as_string()
                .expect("the encoder returns text")
                .to_std_string_escaped()),
            Err(e) => Err(e
                .try_native(context)
                .map(|native| native.message().to_string())
                .unwrap_or_else(|_| e.to_string())),
        }
    }

    fn context_and_encoder() -> (Context, JsValue) {
        let mut context = crate::worker::new_context(&Limits::default()).expect("a context");
        let source = format!(
            "({})((message) => {{ throw new TypeError(message); }})",
            codeact_runtime::JS_ENCODER
        );
        let encoder = context
            .eval(Source::from_bytes(&source))
            .expect("the encoder loads");
        (context, encoder)
    }

    /// Every value both ways, strict and lenient: the same JSON (compared as
    /// values), the same refusal, or left to the encoder where expected.
    #[test]
    fn values_written_in_rust_are_what_the_encoder_writes() {
        let (mut context, encoder) = context_and_encoder();
        let cases = [
            "42",
            "-0",
            "0.1 + 0.2",
            "1e21",
            "-1e-7",
            "2 ** 53 + 2",
            "2 ** 64",
            "-(2 ** 63)",
            "123456789.125",
            "'plain'",
            "'quote \" backslash \\\\ newline \\n tab \\t nul \\u0000 é 💡'",
            "true",
            "null",
            "[]",
            "({})",
            "[1, 'a', null, true, [2, [3]], {b: {c: 'd'}}]",
            "({a: 1, b: [1, 2], c: {d: null}, 'odd key': 2, '': 3, 10: 'ten', 2: 'two'})",
            "({a: undefined, b: () => 1, c: Symbol('s'), d: 1})",
            "[undefined, () => 1, Symbol('s'), 1]",
            "[NaN, Infinity, -Infinity]",
            "({n: NaN})",
            "undefined",
            "(() => 1)",
            "Symbol('top')",
            "new Date(0)",
            "({when: new Date(86400000), bad: new Date(NaN)})",
            "Object.create(Date.prototype)",
            "(() => { const d = new Date(5); Object.setPrototypeOf(d, null); return d; })()",
            "(() => { const a = [1, 2, 3]; delete a[1]; return a; })()",
            "(() => { const a = [1]; a.extra = 2; return a; })()",
            "(() => { const a = []; a.length = 3; return a; })()",
            "Object.defineProperty({a: 1}, 'hidden', {value: 2, enumerable: false})",
            "(() => { const o = {a: 1}; o[Symbol('s')] = 2; return o; })()",
            "({get g() { return 'got'; }, after: 1})",
            "(() => { class P { constructor() { this.x = 1; } get y() { return 2; } } return new P(); })()",
            "Object.create({inherited: 1}, {own: {value: 2, enumerable: true}})",
            "new Map([[1, 2]])",
            "new String('ab')",
            "new Number(5)",
            "new Error('boom')",
            "new Uint8Array([1, 2])",
            "(function () { return arguments; })(1, 2)",
            "(() => { const o = {}; o.self = o; return o; })()",
            "(() => { const a = []; a[0] = {inner: a}; return a; })()",
            "(() => { const shared = {s: 1}; return [shared, shared, {again: shared}]; })()",
            "[[[[[[1]]]]]]",
            "({a: {b: {c: {d: {e: {f: 1}}}}}})",
            "10n",
            "({big: 10n})",
            "'\\ud800'",
            "({'\\udc00': 1})",
            "new Proxy({a: 1}, {})",
            "({p: new Proxy([1], {})})",
            "Object.create(new Proxy({}, {}))",
        ];
        for case in cases {
            let value = context
                .eval(Source::from_bytes(case))
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            for (lenient, root) in [(false, "output"), (true, "args")] {
                for max_depth in [64, 3] {
                    let rules = Rules {
                        max_depth,
                        lenient,
                        root,
                    };
                    let native = encode(&value, rules, &mut context)
                        .unwrap_or_else(|e| panic!("{case}: {e}"));
                    let expected = by_the_encoder(&encoder, &value, rules, &mut context);
                    let what = format!("{case} (lenient {lenient}, depth {max_depth})");
                    match (native, expected) {
                        (Encoded::Json(text), Ok(expected)) => {
                            let ours: Value = serde_json::from_str(&text)
                                .unwrap_or_else(|e| panic!("{what}: {text}: {e}"));
                            let theirs: Value = serde_json::from_str(&expected)
                                .unwrap_or_else(|e| panic!("{what}: {expected}: {e}"));
                            assert_eq!(ours, theirs, "{what}: {text} vs {expected}");
                        }
                        (Encoded::Refused(message), Err(expected)) => {
                            assert_eq!(message, expected, "{what}");
                        }
                        (Encoded::Unsure, _) => {}
                        (native, expected) => panic!("{what}: {native:?} vs {expected:?}"),
                    }
                }
            }
        }
    }

    /// Rust decides the common values itself: only what the module docs list
    /// goes back to the encoder.
    #[test]
    fn only_proxies_bigints_lone_surrogates_and_strict_refusals_are_left_to_the_encoder() {
        let (mut context, _) = context_and_encoder();
        let lenient = Rules {
            max_depth: 64,
            lenient: true,
            root: "args",
        };
        let strict = Rules {
            lenient: false,
            root: "output",
            ..lenient
        };
        for (case, rules, left) in [
            (
                "({a: 1, b: [1, 'x', null, new Date(0)], c: {d: true}})",
                strict,
                false,
            ),
            ("({a: undefined, f: () => 1, n: NaN})", lenient, false),
            ("({a: undefined})", strict, true),
            ("({n: NaN})", strict, true),
            ("[10n]", lenient, true),
            ("'\\ud800'", lenient, true),
            ("new Proxy({}, {})", lenient, true),
        ] {
            let value = context.eval(Source::from_bytes(case)).expect(case);
            let native = encode(&value, rules, &mut context).expect(case);
            assert_eq!(native == Encoded::Unsure, left, "{case}: {native:?}");
        }
    }

    /// An array longer than Boa's loop-iteration limit is left to the encoder,
    /// whose loop ends at that limit, rather than written here without one.
    #[test]
    fn an_array_longer_than_the_loop_limit_is_left_to_the_encoder() {
        let limits = Limits {
            max_operations: 1_000,
            ..Limits::default()
        };
        let mut context = crate::worker::new_context(&limits).expect("a context");
        let rules = Rules {
            max_depth: 64,
            lenient: true,
            root: "args",
        };
        let short = context
            .eval(Source::from_bytes("new Array(1000).fill(1)"))
            .expect("short");
        assert!(matches!(
            encode(&short, rules, &mut context),
            Ok(Encoded::Json(_))
        ));
        let long = context
            .eval(Source::from_bytes("[].concat(new Array(1001).fill(1))"))
            .expect("long");
        assert_eq!(
            encode(&long, rules, &mut context).ok(),
            Some(Encoded::Unsure)
        );
    }

    /// A getter's exception is the script's, as the encoder lets it through.
    #[test]
    fn a_getter_that_throws_throws_through_the_writing() {
        let (mut context, _) = context_and_encoder();
        let value = context
            .eval(Source::from_bytes(
                "({get bad() { throw new RangeError('mine'); }})",
            ))
            .expect("an object");
        let rules = Rules {
            max_depth: 64,
            lenient: true,
            root: "args",
        };
        let error = encode(&value, rules, &mut context).expect_err("the getter throws");
        assert!(error.to_string().contains("mine"), "{error}");
    }
}
