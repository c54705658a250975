//! The schema's claims about the documents' tagged enums hold for their parsers.

use super::CLOSED_TAGGED_ENUMS;

/// Every variant of every enum listed refuses a field it does not have, as the schema says.
#[test]
fn the_closed_tagged_enums_refuse_unknown_fields() {
    let documents = [
        ("Compression", "{type: none, bits: 1}"),
        ("Compression", "{type: topk, ratio: 0.1, bits: 1}"),
        ("ModelSpec", "{type: mlp, layers: 2}"),
        ("DatasetSpec", "{type: digits, path: x}"),
        ("OptimizerSpec", "{type: sgd, lr: 0.1, beta1: 0.9}"),
        ("Param", "{type: int, min: 1, max: 2, values: [1]}"),
        ("SearcherSpec", "{type: random, points: 3}"),
        ("EarlyStopping", "{type: none, min_trials: 3}"),
    ];
    for (name, document) in documents {
        let refused = match name {
            "Compression" => serde_yaml::from_str::<crate::spec::Compression>(document).is_err(),
            "ModelSpec" => serde_yaml::from_str::<crate::spec::ModelSpec>(document).is_err(),
            "DatasetSpec" => serde_yaml::from_str::<crate::spec::DatasetSpec>(document).is_err(),
            "OptimizerSpec" => {
                serde_yaml::from_str::<crate::spec::OptimizerSpec>(document).is_err()
            }
            "Param" => serde_yaml::from_str::<crate::experiment::Param>(document).is_err(),
            "SearcherSpec" => {
                serde_yaml::from_str::<crate::experiment::SearcherSpec>(document).is_err()
            }
            "EarlyStopping" => {
                serde_yaml::from_str::<crate::experiment::EarlyStopping>(document).is_err()
            }
            other => panic!("no case for {other}"),
        };
        assert!(refused, "{name} accepted {document}");
    }
    for name in CLOSED_TAGGED_ENUMS {
        assert!(
            documents.iter().any(|(listed, _)| *listed == name),
            "{name} is not tried"
        );
    }
}
