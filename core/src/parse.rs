//! Reading a submitted document: strict deserialisation from JSON or YAML (every error names the field,
//! in words), a plain answer for a document of the other kind, then the document's semantic checks.
//! [`DroverJob::parse`] and [`DroverExperiment::parse`] live here, above the types and their checks
//! ([`crate::validate`], [`crate::experiment_validate`]).

use crate::document::{EXPERIMENT_KIND, Format, KIND, MAX_DOCUMENT_BYTES, SpecError};
use crate::experiment::DroverExperiment;
use crate::spec::DroverJob;

impl DroverJob {
    /// Parses and validates a document. The error names the first problem found.
    pub fn parse(bytes: &[u8], format: Format) -> Result<DroverJob, SpecError> {
        let job: DroverJob = parse_document(bytes, format)
            .map_err(|err| wrong_kind(bytes, EXPERIMENT_KIND, KIND).unwrap_or(err))?;
        crate::validate::validate(&job)?;
        within_size(&job, "job")?;
        Ok(job)
    }
}

impl DroverExperiment {
    /// Parses and validates a document. The error names the first problem found.
    pub fn parse(bytes: &[u8], format: Format) -> Result<DroverExperiment, SpecError> {
        let experiment: DroverExperiment = parse_document(bytes, format)
            .map_err(|err| wrong_kind(bytes, KIND, EXPERIMENT_KIND).unwrap_or(err))?;
        crate::experiment_validate::validate(&experiment)?;
        within_size(&experiment, "experiment")?;
        Ok(experiment)
    }
}

/// A document at most [`MAX_DOCUMENT_BYTES`] long as stored (JSON, aliases expanded).
fn within_size(document: &impl serde::Serialize, what: &str) -> Result<(), SpecError> {
    let bytes = serde_json::to_vec(document).map_or(usize::MAX, |json| json.len());
    if bytes > MAX_DOCUMENT_BYTES {
        return Err(SpecError::new(
            "(document)",
            format!(
                "the {what} is {bytes} bytes once its YAML aliases are expanded; at most {MAX_DOCUMENT_BYTES} are accepted"
            ),
        ));
    }
    Ok(())
}

/// Whether a document's text says it is of `kind` (a `kind:` line in YAML, a `"kind"` member in
/// JSON), without parsing it: which parser to give it to, or why it did not parse.
pub fn declares_kind(bytes: &[u8], kind: &str) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    text.lines().any(|line| {
        let line = line.trim().trim_start_matches('{').trim();
        let rest = line
            .strip_prefix("kind:")
            .or_else(|| line.strip_prefix("\"kind\":"))
            .or_else(|| line.strip_prefix("\"kind\" :"));
        rest.is_some_and(|v| {
            v.trim()
                .trim_matches(|c| c == '"' || c == '\'' || c == ',')
                .trim()
                == kind
        })
    }) || text.contains(&format!("\"kind\":\"{kind}\""))
        || text.contains(&format!("\"kind\": \"{kind}\""))
}

/// When a document that does not parse says it is of kind `found` (not `expected`), the error says
/// so, rather than naming the first field the other kind does not have.
fn wrong_kind(bytes: &[u8], found: &str, expected: &str) -> Option<SpecError> {
    declares_kind(bytes, found).then(|| {
        let how = if found == EXPERIMENT_KIND {
            "submit it with `drover experiment submit` (POST /api/v1/experiments)"
        } else {
            "submit it with `drover submit` (POST /api/v1/jobs)"
        };
        SpecError::new(
            "kind",
            format!("this is a {found}, not a {expected}: {how}"),
        )
    })
}

/// Deserialises a document strictly; the error names the field (or says the bytes are not a document).
fn parse_document<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    format: Format,
) -> Result<T, SpecError> {
    match format {
        Format::Json => {
            // Read as JSON Schema reads it (`crate::json`): `2.0` is an integer, keys are unique.
            let tree = crate::json::read(bytes).map_err(|err| {
                let mut spec_err = field_error(&err.path, &err.error);
                spec_err.malformed = !err.error.is_data();
                spec_err
            })?;
            serde_path_to_error::deserialize(tree).map_err(path_error)
        }
        Format::Yaml => {
            // Any other error the walk meets, the parse below meets too and names the field.
            if let Err(err) = crate::yaml_budget::within_budget(bytes)
                && crate::yaml_budget::is_over_budget(&err)
            {
                return Err(SpecError::malformed("(document)", err.to_string()));
            }
            let de = serde_yaml::Deserializer::from_slice(bytes);
            serde_path_to_error::deserialize(de).map_err(|err| {
                // serde_yaml does not classify its errors: anything that is not one of serde's
                // data errors (or ours, from validation) is a syntax error.
                let message = err.inner().to_string();
                let data = [
                    "invalid type",
                    "invalid value",
                    "invalid length",
                    "unknown variant",
                    "unknown field",
                    "missing field",
                    "duplicate field",
                ];
                let malformed = !data.iter().any(|prefix| message.contains(prefix));
                let mut spec_err = path_error(err);
                spec_err.malformed = malformed;
                spec_err
            })
        }
    }
}

fn path_error<E: std::fmt::Display>(err: serde_path_to_error::Error<E>) -> SpecError {
    field_error(&err.path().to_string(), err.inner())
}

/// The error at `path` (serde_path_to_error's spelling) as a [`SpecError`] naming the field.
fn field_error(path: &str, err: &impl std::fmt::Display) -> SpecError {
    // serde_path_to_error writes `?` for a position it could not name (inside a half-parsed value).
    let path = path.trim_end_matches(".?").to_owned();
    let field = if matches!(path.as_str(), "." | "?" | "") {
        "(document)".to_owned()
    } else {
        path
    };
    // serde_yaml puts the path in front of its own messages: said once, as the field.
    let message = err.to_string();
    let message = message
        .strip_prefix(&format!("{field}: "))
        .unwrap_or(&message);
    SpecError::new(field, in_words(message))
}

/// serde's messages name Rust types (`expected u32`, `expected struct TaskRange`): say what is
/// expected in words instead.
fn in_words(message: &str) -> String {
    let mut message = message.to_owned();
    for (rust, words) in [
        (
            "expected u8",
            "expected a non-negative integer of at most 255",
        ),
        (
            "expected u16",
            "expected a non-negative integer of at most 65535",
        ),
        (
            "expected u32",
            "expected a non-negative integer of at most 4294967295",
        ),
        ("expected u64", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected i32", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
    ] {
        if let Some(rest) = message.strip_suffix(rust).map(str::to_owned) {
            message = format!("{rest}{words}");
        } else {
            message = message.replace(&format!("{rust} "), &format!("{words} "));
        }
    }
    if let Some(at) = message.find("expected struct ") {
        message.replace_range(at.., "expected a mapping of its fields");
    }
    message
}
