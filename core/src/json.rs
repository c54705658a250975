//! Reading a JSON body as JSON Schema (and so the API's OpenAPI document) means it: a whole number
//! written with a fraction or an exponent (`2.0`, `2e3`) is the integer it equals, so an integer
//! field takes it, as JavaScript and Python clients write such numbers; and an object names each key
//! once (a repeated key is refused rather than its last value silently winning).

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The largest magnitude up to which every whole `f64` is exactly the integer it spells.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// Why [`read`] refused some bytes: serde_json's error (a syntax error, or a `duplicate field` as a
/// data error) and the path to where it happened (`spec.name`; `.` for the whole document).
#[derive(Debug)]
pub struct ReadError {
    pub path: String,
    pub error: serde_json::Error,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.error)
    }
}

/// Parses `bytes` as one JSON value, whole numbers as integers, repeated keys refused.
pub fn read(bytes: &[u8]) -> Result<Value, ReadError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Strict(value) = serde_path_to_error::deserialize(&mut de).map_err(|err| ReadError {
        path: err.path().to_string(),
        error: err.into_inner(),
    })?;
    de.end().map_err(|error| ReadError {
        path: ".".to_owned(),
        error,
    })?;
    Ok(value)
}

/// A JSON value read by [`read`]'s rules.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        if v.fract() == 0.0 && v.abs() <= EXACT {
            // Exact: a whole f64 of at most 2^53 converts without rounding.
            return Ok(if v >= 0.0 {
                Value::from(v as u64)
            } else {
                Value::from(v as i64)
            });
        }
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number must be finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Strict::deserialize(deserializer).map(|Strict(value)| value)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::read;
    use serde_json::json;

    #[test]
    fn whole_numbers_are_integers_and_others_stay_as_they_are() {
        let value = read(
            br#"{"a": 2.0, "b": -3.0, "c": 2e3, "d": 0.5, "e": 7, "f": [1.0, 1.5], "g": -0.0}"#,
        )
        .unwrap();
        assert_eq!(
            value,
            json!({"a": 2, "b": -3, "c": 2000, "d": 0.5, "e": 7, "f": [1, 1.5], "g": 0})
        );
        assert!(value["a"].is_u64() && value["b"].is_i64());
        // Past 2^53 a float is not exactly one integer: it stays a float (and no integer field takes it).
        assert!(read(b"1e300").unwrap().is_f64());
        let into_u32: u32 = serde_json::from_value(read(b"2525.0").unwrap()).unwrap();
        assert_eq!(into_u32, 2525);
    }

    #[test]
    fn a_repeated_key_is_refused_and_syntax_errors_stay_syntax_errors() {
        let err = read(br#"{"spec": {"name": "a", "name": "b"}}"#).unwrap_err();
        assert!(
            err.error.to_string().contains("duplicate field `name`"),
            "{err}"
        );
        assert!(err.error.is_data());
        assert_eq!(err.path, "spec", "the object that repeats it");
        let cut = read(b"{\"a\": ").unwrap_err();
        assert!(cut.error.is_eof());
        assert_eq!(cut.path, "a");
        assert!(read(b"{} {}").unwrap_err().error.is_syntax());
    }
}
