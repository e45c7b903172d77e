//! What the engines' benchmarks share.

/// A JSON value of about `bytes` bytes (as compact JSON): records like an API
/// listing (ids, names, prices, flags, tags). Prices are exact binary fractions,
/// so every engine gives them back digit for digit. The same value as the bench
/// harness's (`codeact_cli::bench::sample_value`), so the figures compare.
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
