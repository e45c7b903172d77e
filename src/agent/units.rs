//! A final result that is a tool's number in another unit than the task asks
//! for: `get_price` says its prices are "in euros", the task asks "in US
//! dollars", and the script returned the price as it came. Units are read from
//! words (a small lexicon of currencies, temperatures, lengths and masses), in
//! the tool's description and in the task; no code runs.
//!
//! Why: on currency tasks a small model returned the euro price unconverted in
//! every run on every runtime, though the card asks to convert units and
//! currencies; told which unit the number is in, which one the task wants and
//! which tool converts, it called the converter.

use serde_json::Value;

/// What a unit measures: two units only clash within one dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    Currency,
    Temperature,
    Length,
    Mass,
}

/// One unit: its name as the host says it, its ISO code for a currency, and
/// the lowercase spellings that name it in text.
#[derive(Debug, PartialEq, Eq)]
pub struct Unit {
    /// The name the feedback uses (`US dollars`).
    pub name: &'static str,
    pub dimension: Dimension,
    /// The three-letter code of a currency (`USD`), which converters take.
    pub code: Option<&'static str>,
    spellings: &'static [&'static str],
}

const fn currency(
    name: &'static str,
    code: &'static str,
    spellings: &'static [&'static str],
) -> Unit {
    Unit {
        name,
        dimension: Dimension::Currency,
        code: Some(code),
        spellings,
    }
}

const fn measure(
    name: &'static str,
    dimension: Dimension,
    spellings: &'static [&'static str],
) -> Unit {
    Unit {
        name,
        dimension,
        code: None,
        spellings,
    }
}

/// The units known. A spelling that names two units (`pounds`: money or
/// mass) is listed under both and counts for either dimension; a qualified
/// spelling (`canadian dollars`) wins over the plain one it contains.
pub static UNITS: &[Unit] = &[
    currency("euros", "EUR", &["euro", "euros", "eur", "€"]),
    currency(
        "US dollars",
        "USD",
        &[
            "us dollar",
            "us dollars",
            "u.s. dollars",
            "american dollars",
            "dollar",
            "dollars",
            "usd",
            "$",
        ],
    ),
    currency("Japanese yen", "JPY", &["japanese yen", "yen", "jpy", "¥"]),
    currency(
        "British pounds",
        "GBP",
        &[
            "british pound",
            "british pounds",
            "pounds sterling",
            "pound sterling",
            "sterling",
            "gbp",
            "£",
            "pound",
            "pounds",
        ],
    ),
    currency(
        "Swiss francs",
        "CHF",
        &["swiss franc", "swiss francs", "chf"],
    ),
    currency(
        "Canadian dollars",
        "CAD",
        &["canadian dollar", "canadian dollars", "cad"],
    ),
    currency(
        "Australian dollars",
        "AUD",
        &["australian dollar", "australian dollars", "aud"],
    ),
    currency(
        "Chinese yuan",
        "CNY",
        &["chinese yuan", "yuan", "renminbi", "cny", "rmb"],
    ),
    currency(
        "Indian rupees",
        "INR",
        &["indian rupee", "indian rupees", "rupee", "rupees", "inr"],
    ),
    measure(
        "degrees Celsius",
        Dimension::Temperature,
        &["celsius", "centigrade", "°c"],
    ),
    measure(
        "degrees Fahrenheit",
        Dimension::Temperature,
        &["fahrenheit", "°f"],
    ),
    measure("kelvin", Dimension::Temperature, &["kelvin", "kelvins"]),
    measure(
        "kilometres",
        Dimension::Length,
        &["kilometre", "kilometres", "kilometer", "kilometers", "km"],
    ),
    measure(
        "metres",
        Dimension::Length,
        &["metre", "metres", "meter", "meters"],
    ),
    measure("miles", Dimension::Length, &["mile", "miles"]),
    measure("feet", Dimension::Length, &["foot", "feet", "ft"]),
    measure("inches", Dimension::Length, &["inch", "inches"]),
    measure(
        "kilograms",
        Dimension::Mass,
        &["kilogram", "kilograms", "kilo", "kilos", "kg"],
    ),
    measure("grams", Dimension::Mass, &["gram", "grams"]),
    measure("pounds", Dimension::Mass, &["pound", "pounds", "lb", "lbs"]),
    measure("ounces", Dimension::Mass, &["ounce", "ounces", "oz"]),
];

/// Characters of a text read for units: a task or a description longer than
/// this is read up to here.
const TEXT_READ: usize = 4_000;

/// The units `text` names, each once, in the order of [`UNITS`]. Spellings
/// match whole words (`eur` not in `europe`), longest first, so `canadian
/// dollars` is not also read as US dollars.
/// Every spelling of [`UNITS`] once, longest first: sorted once per process.
static SPELLINGS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let mut spellings: Vec<&'static str> = UNITS
        .iter()
        .flat_map(|unit| unit.spellings.iter().copied())
        .collect();
    spellings.sort_by(|a, b| b.chars().count().cmp(&a.chars().count()).then(a.cmp(b)));
    spellings.dedup();
    spellings
});

pub fn named_in(text: &str) -> Vec<&'static Unit> {
    let mut text: String = text
        .chars()
        .take(TEXT_READ)
        .collect::<String>()
        .to_lowercase();
    let mut found: Vec<&'static Unit> = Vec::new();
    for &spelling in SPELLINGS.iter() {
        if blank_word(&mut text, spelling) {
            // A spelling shared by units (`pounds`) names each of them.
            for unit in UNITS
                .iter()
                .filter(|unit| unit.spellings.contains(&spelling))
            {
                if !found.iter().any(|seen| std::ptr::eq(*seen, unit)) {
                    found.push(unit);
                }
            }
        }
    }
    found.sort_by_key(|unit| UNITS.iter().position(|known| std::ptr::eq(known, *unit)));
    found
}

/// Blanks every whole-word occurrence of `word` in `text`; whether there was
/// one. A symbol (`€`, `$`) needs no word boundary.
fn blank_word(text: &mut String, word: &str) -> bool {
    let symbol = !word.chars().any(char::is_alphanumeric);
    let mut any = false;
    let mut from = 0;
    while let Some(offset) = text[from..].find(word) {
        let start = from + offset;
        let end = start + word.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let bounded = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if symbol || (bounded(before) && bounded(after)) {
            text.replace_range(start..end, &" ".repeat(word.len()));
            any = true;
        }
        from = end;
    }
    any
}

/// A number a tool returned in this run: the whole result, or a field of a
/// map it returned.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberSeen {
    pub tool: String,
    pub number: f64,
}

/// Numbers a tool result holds at its top: the result itself, or a map's
/// numeric fields (a price, a `temp_c`), which is where a unit from the
/// tool's description applies.
pub fn numbers_of(tool: &str, value: &Value) -> Vec<NumberSeen> {
    let seen = |number| NumberSeen {
        tool: tool.to_string(),
        number,
    };
    match value {
        Value::Number(n) => n.as_f64().map(seen).into_iter().collect(),
        Value::Object(map) => map.values().filter_map(Value::as_f64).map(seen).collect(),
        _ => Vec::new(),
    }
}

/// A final result in another unit than the task asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherUnit {
    /// The tool whose number the result is.
    pub tool: String,
    /// The unit the tool's description gives.
    pub given: &'static Unit,
    /// The unit the task names.
    pub asked: &'static Unit,
}

/// Whether `result` is a number some tool returned (`seen`) in a unit its
/// description names (`descriptions`: tool name and description), while the
/// task names another unit of the same dimension and not the tool's. A
/// description or a task naming two units of that dimension says nothing
/// certain, and is passed over.
pub fn other_unit(
    task: &str,
    result: &Value,
    seen: &[NumberSeen],
    descriptions: &[(String, String)],
) -> Option<OtherUnit> {
    let result = result.as_f64()?;
    let asked_units = named_in(task);
    if asked_units.is_empty() {
        return None;
    }
    seen.iter()
        .filter(|number| same_number(number.number, result))
        .find_map(|number| {
            let (_, description) = descriptions.iter().find(|(name, _)| *name == number.tool)?;
            let given_units = named_in(description);
            given_units.iter().find_map(|given| {
                let one_given = given_units
                    .iter()
                    .filter(|unit| unit.dimension == given.dimension)
                    .count()
                    == 1;
                let asked: Vec<&&Unit> = asked_units
                    .iter()
                    .filter(|unit| unit.dimension == given.dimension)
                    .collect();
                (one_given && asked.len() == 1 && !std::ptr::eq(*asked[0], *given)).then(|| {
                    OtherUnit {
                        tool: number.tool.clone(),
                        given,
                        asked: asked[0],
                    }
                })
            })
        })
}

/// Whether two numbers are the same up to rounding in the last digits (a
/// result typed back as a literal, `2.2`, after it was shown).
fn same_number(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(text: &str) -> Vec<&'static str> {
        named_in(text).iter().map(|unit| unit.name).collect()
    }

    fn price_tools() -> Vec<(String, String)> {
        vec![
            (
                "get_price".to_string(),
                "The price of one unit of a shop item, in euros (a number).".to_string(),
            ),
            (
                "convert_currency".to_string(),
                "Converts an amount between currencies given as three-letter codes.".to_string(),
            ),
        ]
    }

    fn seen(tool: &str, number: f64) -> Vec<NumberSeen> {
        vec![NumberSeen {
            tool: tool.to_string(),
            number,
        }]
    }

    #[test]
    fn units_are_read_as_whole_words_with_the_longest_spelling_first() {
        assert_eq!(names("How much is it in US dollars?"), ["US dollars"]);
        assert_eq!(names("in Canadian dollars"), ["Canadian dollars"]);
        assert_eq!(names("Europe's eurozone"), Vec::<&str>::new());
        assert_eq!(names("10 km or 6 miles"), ["kilometres", "miles"]);
        assert_eq!(names("costs 5€"), ["euros"]);
    }

    #[test]
    fn a_word_that_names_two_units_counts_for_both() {
        assert_eq!(names("in pounds"), ["British pounds", "pounds"]);
        assert_eq!(names("in pounds sterling"), ["British pounds"]);
    }

    #[test]
    fn a_tools_euro_price_returned_for_a_dollar_question_is_another_unit() {
        let found = other_unit(
            "How much does one cheese cost in US dollars?",
            &json!(7.8),
            &seen("get_price", 7.8),
            &price_tools(),
        )
        .expect("another unit");
        assert_eq!(found.tool, "get_price");
        assert_eq!(found.given.code, Some("EUR"));
        assert_eq!(found.asked.code, Some("USD"));
    }

    #[test]
    fn a_converted_or_computed_number_is_not_another_unit() {
        let task = "How much does one cheese cost in US dollars?";
        let converted = vec![
            NumberSeen {
                tool: "get_price".to_string(),
                number: 7.8,
            },
            NumberSeen {
                tool: "convert_currency".to_string(),
                number: 8.58,
            },
        ];
        assert_eq!(
            other_unit(task, &json!(8.58), &converted, &price_tools()),
            None
        );
        assert_eq!(
            other_unit(task, &json!(15.6), &converted, &price_tools()),
            None
        );
    }

    #[test]
    fn a_task_in_the_tools_own_unit_or_in_none_is_left_alone() {
        let tools = price_tools();
        let euro = seen("get_price", 7.8);
        assert_eq!(
            other_unit("The price in euros?", &json!(7.8), &euro, &tools),
            None
        );
        assert_eq!(
            other_unit("The price of cheese?", &json!(7.8), &euro, &tools),
            None
        );
        // Both units named: which one is asked is not certain.
        assert_eq!(
            other_unit(
                "Euros or dollars: which is it in dollars?",
                &json!(7.8),
                &euro,
                &tools
            ),
            None
        );
    }

    #[test]
    fn a_field_of_a_map_carries_the_unit_of_its_tools_description() {
        let tools = vec![(
            "get_weather".to_string(),
            "Current weather: a map with city, temp_c (a number, degrees Celsius).".to_string(),
        )];
        let numbers = numbers_of("get_weather", &json!({"city": "Oslo", "temp_c": 4.5}));
        let found = other_unit(
            "What is the temperature in Oslo in Fahrenheit?",
            &json!(4.5),
            &numbers,
            &tools,
        )
        .expect("another unit");
        assert_eq!(found.given.name, "degrees Celsius");
        assert_eq!(found.asked.name, "degrees Fahrenheit");
    }

    #[test]
    fn units_of_different_dimensions_never_clash() {
        let tools = vec![(
            "distance".to_string(),
            "The road distance between two cities, in kilometres.".to_string(),
        )];
        assert_eq!(
            other_unit(
                "How far is it from Oslo to Bergen, and what does the trip cost in dollars?",
                &json!(463),
                &seen("distance", 463.0),
                &tools,
            ),
            None
        );
    }

    #[test]
    fn a_non_number_result_is_never_another_unit() {
        assert_eq!(
            other_unit(
                "The price in US dollars?",
                &json!("7.8"),
                &seen("get_price", 7.8),
                &price_tools()
            ),
            None
        );
    }
}
