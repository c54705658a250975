//! How the runtime names a policy's enums in what it stores and says: the `snake_case` name they
//! serialise to (stored reasons, the forecast), or the same in words (event messages).

/// The name `value` serialises to (`fair_share`); empty for a value that is not a plain string.
pub(crate) fn serde_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The same name in words, for messages (`fair share`).
pub(crate) fn in_words(value: &impl serde::Serialize) -> String {
    serde_name(value).replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_reads_as_its_stored_name_or_in_words() {
        let reason = drover_scheduler::WaitReason::FairShare;
        assert_eq!(serde_name(&reason), "fair_share");
        assert_eq!(in_words(&reason), "fair share");
    }
}
