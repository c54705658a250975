//! Helpers for the JSON schemas of the documents' types (the custom resources' schemas), shared by
//! [`crate::spec`] and [`crate::experiment`].

/// In a custom resource's schema, an internally tagged enum (`{type: mlp, hidden: [...]}`) is one object:
/// `type` lists every variant and the other fields are the union of the variants' fields. Kubernetes'
/// structural schemas cannot say "these fields only with that type"; the API's validation does. A field
/// two variants type differently is a `number` where both are numbers (`int` and `double` bounds),
/// else left open.
pub(crate) fn one_object(schema: &mut schemars::Schema) {
    use serde_json::Value;
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some(Value::Array(variants)) = object.remove("oneOf") else {
        return;
    };
    let mut tags = Vec::new();
    let mut fields = serde_json::Map::new();
    for variant in &variants {
        let Some(properties) = variant.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (name, field) in properties {
            if name == "type" {
                match (field.get("const"), field.get("enum")) {
                    (Some(tag), _) => tags.push(tag.clone()),
                    (None, Some(Value::Array(more))) => tags.extend(more.iter().cloned()),
                    _ => {}
                }
            } else if let Some(existing) = fields.get_mut(name) {
                union_field(existing, field);
            } else {
                fields.insert(name.clone(), field.clone());
            }
        }
    }
    fields.insert(
        "type".to_owned(),
        serde_json::json!({"type": "string", "enum": tags}),
    );
    object.insert("type".to_owned(), "object".into());
    object.insert("properties".to_owned(), Value::Object(fields));
    object.insert("required".to_owned(), serde_json::json!(["type"]));
}

/// A field of one variant of [`one_object`]'s enum merged with the same field of another; the first
/// one's description stays.
fn union_field(existing: &mut serde_json::Value, other: &serde_json::Value) {
    use serde_json::Value;
    let shape = |field: &Value| {
        let mut field = field.clone();
        if let Some(map) = field.as_object_mut() {
            map.remove("description");
            map.remove("default");
        }
        field
    };
    if shape(existing) == shape(other) {
        return;
    }
    let numeric = |field: &Value| {
        matches!(
            field.get("type").and_then(Value::as_str),
            Some("integer" | "number")
        )
    };
    let description = existing.get("description").cloned();
    let mut merged = if numeric(existing) && numeric(other) {
        serde_json::json!({"type": "number"})
    } else {
        serde_json::json!({"x-kubernetes-preserve-unknown-fields": true})
    };
    if let (Some(description), Some(map)) = (description, merged.as_object_mut()) {
        map.insert("description".to_owned(), description);
    }
    *existing = merged;
}
