//! The API's OpenAPI document beyond what utoipa's derives infer (the custom resources' schemas are
//! [`crate::schema`]'s): the patterns the API shares between the documents' fields and its own
//! parameters, the builders the documents' hand-written schemas use (each beside its type: a task
//! range as a count or a `{min, max}` range, the label and environment maps, the metadata), and
//! [`complete`], what no field's schema can say (tagged enums' variants refuse fields they do not
//! have; a job spec's `type` says which of `train` and `command` it has). Each field's schema says
//! what [`crate::validate`] and [`crate::experiment_validate`] enforce of that field alone; rules
//! across fields are said in words in the operations' descriptions. This module uses no other of
//! the crate, so every document's module may use it.

use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{KnownFormat, RefOr};

/// A DNS-1123 label (`validate::validate_name`), with a `maxLength` of 63.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A label's key (`validate::is_label_key`): an optional DNS prefix (dot-separated DNS-1123 labels)
/// and `/`, then a name of at most 63 letters, digits, `-`, `_` and `.` that starts and ends with a
/// letter or digit.
pub const LABEL_KEY_PATTERN: &str = "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A label's value (`validate::is_label_value`): empty, or at most 63 letters, digits, `-`, `_` and
/// `.` that start and end with a letter or digit.
pub const LABEL_VALUE_PATTERN: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// An environment variable's name (`validate::is_env_name`).
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// Text that is not blank: at least one character Rust's `str::trim` keeps (Unicode's White_Space
/// spelt out, since `\s` means a different set in each regex dialect).
pub const NOT_BLANK_PATTERN: &str =
    "[^\\t\\n\\v\\f\\r \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]";

/// A parameter's name (`experiment_validate::valid_param_name`): dot-separated words of letters,
/// digits, `_` and `-`.
pub const PARAMETER_NAME_PATTERN: &str = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$";

/// The tagged enums of both documents (`{type: topk, ratio: 0.1}`). Each refuses a field its variant
/// does not have (serde's `deny_unknown_fields`), which utoipa's derive does not say of a variant.
pub const CLOSED_TAGGED_ENUMS: [&str; 7] = [
    "Compression",
    "ModelSpec",
    "DatasetSpec",
    "OptimizerSpec",
    "Param",
    "SearcherSpec",
    "EarlyStopping",
];

/// What the derives cannot say of `components`: every variant of [`CLOSED_TAGGED_ENUMS`] is
/// `additionalProperties: false`, and a job spec's `type` says which of `train` and `command` it has.
pub fn complete(components: &mut utoipa::openapi::Components) {
    close_tagged_variants(components);
    if let Some(spec) = components.schemas.remove("JobSpec") {
        let kind = |this: &str, other: &str| {
            ObjectBuilder::new()
                .property(
                    "type",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some([this])),
                )
                .property(this, ObjectBuilder::new().schema_type(Type::Object))
                .property(other, ObjectBuilder::new().schema_type(Type::Null))
                .required("type")
                .required(this)
                .description(Some(format!(
                    "A `{this}` job: `{this}` is given, `{other}` is not."
                )))
        };
        let spec = AllOfBuilder::new()
            .item(spec)
            .item(
                OneOfBuilder::new()
                    .item(kind("train", "command"))
                    .item(kind("command", "train")),
            )
            .into();
        components
            .schemas
            .insert("JobSpec".to_owned(), RefOr::T(spec));
    }
}

/// Marks every variant of [`CLOSED_TAGGED_ENUMS`] among `components` `additionalProperties: false`.
fn close_tagged_variants(components: &mut utoipa::openapi::Components) {
    for name in CLOSED_TAGGED_ENUMS {
        let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(name) else {
            continue;
        };
        for variant in &mut one_of.items {
            if let RefOr::T(Schema::Object(object)) = variant {
                object.additional_properties =
                    Some(Box::new(AdditionalProperties::FreeForm(false)));
            }
        }
    }
}

/// A string that is always `value`.
pub fn one_string(value: &str, description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .description(Some(description))
        .into()
}

/// Text that must not be blank.
pub fn not_blank() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(NOT_BLANK_PATTERN))
        .description(Some("Must not be blank."))
        .into()
}

fn count(least: u32, most: u32) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
        .minimum(Some(least))
        .maximum(Some(most))
}

/// A task count or an inclusive `{min, max}` range of them, each between `least` and `most`.
pub fn task_range(least: u32, most: u32, description: &str) -> Schema {
    let range = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("min", count(least, most))
        .property("max", count(least, most))
        .required("min")
        .required("max")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    OneOfBuilder::new()
        .item(count(least, most).description(Some("A fixed count: `{min: n, max: n}`")))
        .item(range.description(Some("min ≤ max; min < max makes the job elastic")))
        .description(Some(description))
        .into()
}

/// `schema`, or `null`.
pub fn nullable(schema: Schema) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .item(schema)
        .into()
}

#[cfg(test)]
mod tests;
