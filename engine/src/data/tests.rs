//! The data loaders' own tests: the shipped digits and the CSV reader's errors.

use super::*;

#[test]
fn the_shipped_digits_load_with_a_fixed_split() {
    let Data::Classification(d) = digits().unwrap() else {
        panic!("digits are a table")
    };
    assert_eq!((d.train.len(), d.test.len(), d.classes), (1500, 297, 10));
    assert_eq!(d.input_shape, [1, 8, 8]);
    assert!(d.train.x.iter().all(|v| (0.0..=1.0).contains(v)));
    let again = digits().unwrap();
    assert_eq!(Data::Classification(d), again);
}

#[test]
fn bad_files_get_clear_errors() {
    let err = csv("a,b\n1,2\n3\n", None, "t.csv").unwrap_err().to_string();
    assert!(err.contains("row 2 has 1 columns"), "{err}");
    let err = csv("1,x,2\n", None, "t.csv").unwrap_err().to_string();
    assert!(
        err.contains("is not a number") || err.contains("two rows"),
        "{err}"
    );
    let err = load(
        &DatasetSpec::Idx {
            path: "nope".into(),
        },
        1,
        Path::new("/nonexistent"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cannot read"), "{err}");
    let labelled = csv(
        "f1,f2,kind\n1,2,cat\n3,4,dog\n5,6,cat\n",
        Some("kind"),
        "t.csv",
    )
    .unwrap();
    let Data::Classification(c) = labelled else {
        panic!()
    };
    assert_eq!(c.classes, 2);
    // No header, class names for labels: every row is data.
    let iris = "5.1,3.5,setosa\n4.9,3.0,setosa\n6.3,3.3,virginica\n5.8,2.7,virginica\n";
    let Data::Classification(c) = csv(iris, None, "iris.csv").unwrap() else {
        panic!()
    };
    assert_eq!((c.train.len() + c.test.len(), c.classes), (4, 2));
    let err = csv(iris, Some("species"), "iris.csv")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no column named `species`"), "{err}");
    let err = csv("1,2,0\n3,4,1\n", Some("label"), "t.csv")
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs a header row"), "{err}");
    for bad in ["NaN", "inf", "-inf", "1e40"] {
        let text = format!("a,b,y\n1,2,0\n3,{bad},1\n5,6,0\n");
        let err = csv(&text, None, "t.csv").unwrap_err().to_string();
        assert!(
            err.contains("row 2") && err.contains("not a finite"),
            "{bad}: {err}"
        );
    }
}

/// A dataset path to something endless or to a directory fails at once with a reason, instead of
/// reading `/dev/zero` until the node runs out of memory.
#[test]
fn a_dataset_must_be_a_regular_file() {
    for path in ["/dev/zero", "/tmp"] {
        let err = load(&DatasetSpec::Text { path: path.into() }, 1, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{path}: {err}");
    }
}
