//! Values written as JSON in Rust, for the common values, with the JavaScript
//! encoder's rules (`codeact_runtime::JS_ENCODER`): own enumerable string keys
//! in `Object.keys` order, getters run once as the encoder runs them, a `Date`
//! its ISO string (`null` when invalid), a cycle or a value nested past the
//! limit an error naming its path in the encoder's words. Lenient (tool
//! arguments): `undefined`, functions and symbols left out of objects and
//! `null` in arrays and at the top, non-finite numbers `null`. Strict
//! (completion values): any of those is left to the encoder, whose error
//! names it.
//!
//! Why: interpreted in QuickJS, the encoder cost 10 µs of a tool call's 18
//! (a plain `{a: i, b: 1}`, measured in the guest), and about a quarter of a
//! trivial step; here the text is built in one pass.
//!
//! What it does not decide it hands back ([`Encoded::Unsure`]): a Proxy
//! (whose traps decide what it is), a BigInt (the encoder's error quotes it),
//! an array with holes or other own keys (the encoder reads only what an array
//! owns), a string QuickJS cannot give as UTF-8 (a lone surrogate). The
//! prelude then runs the encoder on the whole value, so a getter met before
//! such a value runs twice. One more difference: the encoder checks again that
//! each key is still the object's own before reading it (a getter may have
//! deleted it); this reads it, from the prototype if it was.

use rquickjs::{Ctx, Function, Object, Type, Value};

/// What [`encode`] made of a value.
pub enum Encoded {
    /// The JSON text.
    Json(String),
    /// An error in the encoder's words (a cycle, too deep).
    Refused(String),
    /// A value it leaves to the JavaScript encoder.
    Unsure,
}

/// What the walk needs besides the value: the `Date` machinery the prelude
/// captured at load (a script cannot have replaced it), and the nesting limit.
pub struct Encoder<'js> {
    pub date_prototype: Object<'js>,
    pub get_time: Function<'js>,
    pub to_iso_string: Function<'js>,
    pub max_depth: usize,
    /// Tool arguments' rules (`true`) or completion values' (`false`).
    pub lenient: bool,
    /// What the value is called in errors: `args`, `output`.
    pub root: &'static str,
}

/// A key on the way down, for an error's path.
enum Step {
    Key(String),
    Index(u32),
}

/// How a walk stopped early.
enum Stop {
    Refused(String),
    Unsure,
    Thrown(rquickjs::Error),
}

impl From<rquickjs::Error> for Stop {
    fn from(error: rquickjs::Error) -> Self {
        Stop::Thrown(error)
    }
}

impl<'js> Encoder<'js> {
    /// `value` as JSON text, or why not; `Err` is an exception a getter threw.
    pub fn encode(&self, ctx: &Ctx<'js>, value: &Value<'js>) -> rquickjs::Result<Encoded> {
        let mut out = String::new();
        let mut walk = Walk {
            encoder: self,
            ctx,
            path: Vec::new(),
            open: Vec::new(),
            out: &mut out,
        };
        match walk.value(value, 0) {
            Ok(()) => Ok(Encoded::Json(out)),
            Err(Stop::Refused(message)) => Ok(Encoded::Refused(message)),
            Err(Stop::Unsure) => Ok(Encoded::Unsure),
            Err(Stop::Thrown(error)) => Err(error),
        }
    }
}

struct Walk<'a, 'js> {
    encoder: &'a Encoder<'js>,
    ctx: &'a Ctx<'js>,
    path: Vec<Step>,
    open: Vec<Object<'js>>,
    out: &'a mut String,
}

impl<'js> Walk<'_, 'js> {
    /// The path of the value being written, as the encoder writes it.
    fn path(&self) -> String {
        let mut text = String::from(self.encoder.root);
        for step in &self.path {
            match step {
                Step::Key(key) => {
                    text.push('.');
                    text.push_str(key);
                }
                Step::Index(index) => text.push_str(&format!("[{index}]")),
            }
        }
        text
    }

    /// Whether `value` is one JSON cannot hold as it is: `undefined`, a
    /// function or a symbol (left out of objects, or `null`, when lenient).
    fn unheld(value: &Value<'js>) -> bool {
        matches!(
            value.type_of(),
            Type::Undefined
                | Type::Uninitialized
                | Type::Function
                | Type::Constructor
                | Type::Symbol
        )
    }

    fn value(&mut self, value: &Value<'js>, depth: usize) -> Result<(), Stop> {
        if depth > self.encoder.max_depth {
            return Err(Stop::Refused(format!(
                "{} is nested deeper than the nesting depth limit of {}",
                self.path(),
                self.encoder.max_depth
            )));
        }
        match value.type_of() {
            Type::String => {
                let text = value
                    .as_string()
                    .ok_or(Stop::Unsure)?
                    .to_string()
                    .map_err(|_| Stop::Unsure)?;
                let quoted = serde_json::to_string(&text).map_err(|_| Stop::Unsure)?;
                self.out.push_str(&quoted);
            }
            Type::Bool => self.out.push_str(if value.as_bool() == Some(true) {
                "true"
            } else {
                "false"
            }),
            Type::Int => self
                .out
                .push_str(&value.as_int().unwrap_or_default().to_string()),
            Type::Float => {
                let number = value.as_float().unwrap_or(f64::NAN);
                if !number.is_finite() && !self.encoder.lenient {
                    return Err(Stop::Unsure);
                } else if !number.is_finite() {
                    self.out.push_str("null");
                } else if number == 0.0 {
                    // -0 too, as JSON.stringify writes it.
                    self.out.push('0');
                } else {
                    // Rust writes a whole float without a fraction (`5`), and
                    // the shortest digits that read back as the same number.
                    self.out.push_str(&number.to_string());
                }
            }
            Type::Null => self.out.push_str("null"),
            Type::Undefined
            | Type::Uninitialized
            | Type::Function
            | Type::Constructor
            | Type::Symbol => {
                if !self.encoder.lenient {
                    return Err(Stop::Unsure);
                }
                self.out.push_str("null");
            }
            Type::Array => self.array(value, depth)?,
            Type::Object | Type::Promise | Type::Exception => self.object(value, depth)?,
            _ => return Err(Stop::Unsure),
        }
        Ok(())
    }

    /// The object's `Date` time, when its prototype chain holds
    /// `Date.prototype` (the encoder's `instanceof`) and it is a real `Date`.
    fn date_time(&self, object: &Object<'js>) -> Option<f64> {
        let mut prototype = object.get_prototype();
        while let Some(link) = prototype {
            if link == self.encoder.date_prototype {
                let time = self
                    .encoder
                    .get_time
                    .call::<_, f64>((rquickjs::function::This(object.clone()),));
                // Not a real Date (`Object.create(Date.prototype)`): an object,
                // as for the encoder; its exception is not the script's.
                return time.map_err(|_| self.ctx.catch()).ok();
            }
            prototype = link.get_prototype();
        }
        None
    }

    /// Marks `object` open, or refuses a cycle.
    fn enter(&mut self, object: &Object<'js>) -> Result<(), Stop> {
        if self.open.iter().any(|open| open == object) {
            return Err(Stop::Refused(format!(
                "{} refers back to itself (a cycle), which JSON cannot hold",
                self.path()
            )));
        }
        self.open.push(object.clone());
        Ok(())
    }

    fn array(&mut self, value: &Value<'js>, depth: usize) -> Result<(), Stop> {
        let object = value.as_object().ok_or(Stop::Unsure)?;
        let length: u32 = object.get("length")?;
        // Holes: the encoder reads only what the array owns.
        if object.keys::<String>().count() != length as usize {
            return Err(Stop::Unsure);
        }
        self.enter(object)?;
        self.out.push('[');
        for index in 0..length {
            if index > 0 {
                self.out.push(',');
            }
            let item: Value = object.get(index)?;
            self.path.push(Step::Index(index));
            self.value(&item, depth + 1)?;
            self.path.pop();
        }
        self.out.push(']');
        self.open.pop();
        Ok(())
    }

    fn object(&mut self, value: &Value<'js>, depth: usize) -> Result<(), Stop> {
        let object = value.as_object().ok_or(Stop::Unsure)?;
        if let Some(time) = self.date_time(object) {
            if !time.is_finite() {
                self.out.push_str("null");
                return Ok(());
            }
            let iso: String = self
                .encoder
                .to_iso_string
                .call((rquickjs::function::This(object.clone()),))?;
            let quoted = serde_json::to_string(&iso).map_err(|_| Stop::Unsure)?;
            self.out.push_str(&quoted);
            return Ok(());
        }
        self.enter(object)?;
        self.out.push('{');
        let keys: Vec<String> = object
            .keys::<String>()
            .collect::<rquickjs::Result<_>>()
            .map_err(|_| Stop::Unsure)?;
        let mut first = true;
        for key in keys {
            let item: Value = object.get(key.as_str())?;
            if Self::unheld(&item) {
                if !self.encoder.lenient {
                    return Err(Stop::Unsure);
                }
                continue;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            let quoted = serde_json::to_string(&key).map_err(|_| Stop::Unsure)?;
            self.out.push_str(&quoted);
            self.out.push(':');
            self.path.push(Step::Key(key));
            self.value(&item, depth + 1)?;
            self.path.pop();
        }
        self.out.push('}');
        self.open.pop();
        Ok(())
    }
}
