//! A bound on how far a YAML document may grow when its aliases are expanded. serde_yaml replays an
//! anchored node at every alias that names it, so a request of a few hundred kilobytes whose
//! aliases name lists of aliases ("billion laughs") would build billions of values; its own guard
//! counts alias jumps, not what they expand to. Before a document is deserialised into its type it
//! is walked once by [`within_budget`], which stops at the first value past the budget.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The most values (scalars, lists and maps) a document may hold once its aliases are expanded. A
/// job or experiment spec has hundreds; the largest a request body allows without aliases (1 MiB
/// of one-character list items) has about half a million.
pub const MAX_VALUES: u64 = 1 << 20;
/// The most bytes of strings it may hold once expanded: four times the largest request body.
pub const MAX_STRING_BYTES: u64 = 4 << 20;

/// Walks the whole document, expanding aliases as deserialisation would, and fails with a message
/// saying so as soon as it passes [`MAX_VALUES`] or [`MAX_STRING_BYTES`].
pub fn within_budget(bytes: &[u8]) -> Result<(), serde_yaml::Error> {
    let mut used = Used::default();
    Walk(&mut used).deserialize(serde_yaml::Deserializer::from_slice(bytes))
}

/// Whether `err` is [`within_budget`]'s refusal (rather than an error the document has anyway).
pub fn is_over_budget(err: &serde_yaml::Error) -> bool {
    err.to_string().contains(OVER_BUDGET)
}

const OVER_BUDGET: &str = "the document expands";

#[derive(Debug, Default)]
struct Used {
    values: u64,
    string_bytes: u64,
}

impl Used {
    fn value<E: de::Error>(&mut self, string_bytes: usize) -> Result<(), E> {
        self.values += 1;
        self.string_bytes += string_bytes as u64;
        if self.values > MAX_VALUES || self.string_bytes > MAX_STRING_BYTES {
            return Err(E::custom(format!(
                "{OVER_BUDGET} (through its YAML aliases) to more than {MAX_VALUES} values or {} \
                 MiB of text; write it out without aliases",
                MAX_STRING_BYTES >> 20
            )));
        }
        Ok(())
    }
}

/// One value of the document, counted with everything inside it.
struct Walk<'a>(&'a mut Used);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.value(v.len())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<(), E> {
        self.0.value(v.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.0.value(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.value(0)?;
        while seq.next_element_seed(Walk(self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.value(0)?;
        while map.next_key_seed(Walk(self.0))?.is_some() {
            map.next_value_seed(Walk(self.0))?;
        }
        Ok(())
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use serde::de::VariantAccess;
        // A tagged value (`!tag value`): the tag, then its content like any other value.
        let used = self.0;
        let ((), variant) = data.variant_seed(Walk(&mut *used))?;
        variant.newtype_variant_seed(Walk(used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_written_out_passes_and_its_values_are_counted() {
        within_budget(b"a: [1, 2, {b: c}]\nd: &x [1, 2]\ne: *x\n").unwrap();
        let mut used = Used::default();
        Walk(&mut used)
            .deserialize(serde_yaml::Deserializer::from_slice(
                b"a: [1, 2, {b: cc}]\n",
            ))
            .unwrap();
        // The top map, `a`, its list, 1, 2, the inner map, `b` and `cc`.
        assert_eq!(used.values, 8);
        assert_eq!(used.string_bytes, 4);
    }

    #[test]
    fn aliases_that_expand_past_the_budget_are_refused_quickly() {
        // 1,000 zeros, named 1,000 times by each of 1,000 aliases: 10⁹ values from 10 KB.
        let mut doc = String::from("a: &a [");
        doc.push_str(&vec!["0"; 1000].join(","));
        doc.push_str("]\nb: &b [");
        doc.push_str(&vec!["*a"; 1000].join(","));
        doc.push_str("]\nc: [");
        doc.push_str(&vec!["*b"; 1000].join(","));
        doc.push_str("]\n");
        let started = std::time::Instant::now();
        let err = within_budget(doc.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("expands"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // Text alike: one long string named many times.
        let long = "x".repeat(100_000);
        let doc = format!("a: &a \"{long}\"\nb: [{}]\n", vec!["*a"; 100].join(","));
        assert!(within_budget(doc.as_bytes()).is_err());
    }
}
