//! Text every store can keep. Postgres refuses the NUL character in `text` and `jsonb`, so a string
//! that carries one is refused at the edge, naming where it is, instead of failing in the database.

use serde_json::Value;

/// Why such a string is refused.
pub const NUL_REASON: &str = "must not contain the NUL character (\\u0000)";

/// The path (`spec.command.argv[1]`, `metadata.labels.team`) of the first string in `value`, key or
/// value, that holds a NUL character; `Some("")` when `value` itself is such a string.
pub fn find_nul(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => text.contains('\0').then(String::new),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            find_nul(item).map(|rest| format!("[{index}]{}", dotted(&rest)))
        }),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(key.replace('\0', "\\u0000"));
            }
            find_nul(item).map(|rest| format!("{key}{}", dotted(&rest)))
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `rest` as a continuation of a path: `.field` or `[3]`.
fn dotted(rest: &str) -> String {
    if rest.is_empty() || rest.starts_with('[') {
        rest.to_owned()
    } else {
        format!(".{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_first_string_with_a_nul() {
        assert_eq!(find_nul(&json!({"a": "ok", "b": [1, "x"]})), None);
        assert_eq!(
            find_nul(&json!({"spec": {"command": {"argv": ["python3", "a\u{0}b"]}}})),
            Some("spec.command.argv[1]".to_owned())
        );
        assert_eq!(
            find_nul(&json!({"metadata": {"labels": {"team\u{0}": "x"}}})),
            Some("metadata.labels.team\\u0000".to_owned())
        );
        assert_eq!(
            find_nul(&json!([[{"k": "\u{0}"}]])),
            Some("[0][0].k".to_owned())
        );
        assert_eq!(find_nul(&json!("\u{0}")), Some(String::new()));
    }
}
