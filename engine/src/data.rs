//! Training data: the shipped UCI digits, IDX (the MNIST family), CSV, plain text, and synthetic
//! clusters, each split into train and test; the data order lives in `sampler`.

use crate::rng::Rng;
pub use crate::sampler::{Cursor, Sampler, epoch_order};
use drover_core::spec::DatasetSpec;
use std::collections::BTreeMap;
use std::path::Path;

/// The UCI handwritten digits (data/digits in the repository, CC BY 4.0), compiled in.
const DIGITS_CSV: &str = include_str!("../../data/digits/digits.csv");
/// The train/test split does not depend on the job's seed, so every job tests on the same samples.
const SPLIT_SEED: u64 = 1998;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {reason}")]
    Format { path: String, reason: String },
}

/// One split of a classification dataset: `n` samples of `dim` features each, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    pub dim: usize,
}

impl Split {
    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    pub train: Split,
    pub test: Split,
    /// Shape of one sample: `[features]`, or `[channels, height, width]` for images.
    pub input_shape: Vec<usize>,
    pub classes: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    pub vocab: Vec<char>,
    pub train: Vec<u32>,
    pub test: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Classification(Classification),
    Text(Text),
}

fn format_error(path: &str, reason: impl Into<String>) -> DataError {
    DataError::Format {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The largest dataset file read, in bytes: a path to something endless (`/dev/zero`) or enormous
/// fails the task with a reason instead of growing it until the node runs out of memory.
pub const MAX_DATASET_BYTES: u64 = 2 << 30;

/// A dataset file's bytes: a regular file (not a device, a pipe or a socket, which could be read for
/// ever or block), of at most [`MAX_DATASET_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    use std::io::Read;
    let io = |error| DataError::Io {
        path: path.display().to_string(),
        error,
    };
    let metadata = std::fs::metadata(path).map_err(io)?;
    if !metadata.is_file() {
        return Err(format_error(
            &path.display().to_string(),
            "not a regular file (a device, a pipe or a directory cannot be a dataset)",
        ));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0).min(1 << 30));
    file.take(MAX_DATASET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_DATASET_BYTES {
        return Err(format_error(
            &path.display().to_string(),
            format!(
                "larger than {} GiB, the most a dataset file may be",
                MAX_DATASET_BYTES >> 30
            ),
        ));
    }
    Ok(bytes)
}

/// Loads the dataset a spec names; relative paths are resolved against `base_dir`.
pub fn load(spec: &DatasetSpec, seed: u64, base_dir: &Path) -> Result<Data, DataError> {
    match spec {
        DatasetSpec::Digits {} => digits(),
        DatasetSpec::Idx { path } => idx(&base_dir.join(path)),
        DatasetSpec::Csv { path, label_column } => {
            let full = base_dir.join(path);
            let bytes = read(&full)?;
            let text = String::from_utf8_lossy(&bytes);
            csv(&text, label_column.as_deref(), &full.display().to_string())
        }
        DatasetSpec::Text { path } => {
            let full = base_dir.join(path);
            let bytes = read(&full)?;
            text(
                &String::from_utf8_lossy(&bytes),
                &full.display().to_string(),
            )
        }
        DatasetSpec::Synthetic {
            samples,
            features,
            classes,
        } => Ok(synthetic(
            *samples as usize,
            *features as usize,
            *classes as usize,
            seed,
        )),
    }
}

/// Splits rows into train and test: a fixed shuffle, the last `test` rows tested.
fn split(x: Vec<f32>, y: Vec<u32>, dim: usize, test: usize) -> (Split, Split) {
    let n = y.len();
    let mut order: Vec<usize> = (0..n).collect();
    Rng::seed(SPLIT_SEED).shuffle(&mut order);
    let take = |rows: &[usize]| Split {
        x: rows
            .iter()
            .flat_map(|&r| x[r * dim..(r + 1) * dim].iter().copied())
            .collect(),
        y: rows.iter().map(|&r| y[r]).collect(),
        dim,
    };
    let cut = n - test.min(n);
    (take(&order[..cut]), take(&order[cut..]))
}

fn digits() -> Result<Data, DataError> {
    let Data::Classification(mut data) = csv(DIGITS_CSV, None, "data/digits/digits.csv")? else {
        return Err(format_error(
            "data/digits/digits.csv",
            "not a classification table",
        ));
    };
    for value in data.train.x.iter_mut().chain(data.test.x.iter_mut()) {
        *value /= 16.0;
    }
    data.input_shape = vec![1, 8, 8];
    Ok(Data::Classification(data))
}

/// A CSV table of numbers; the label is the named column (the header is then required) or the last.
/// Labels that are not integers are numbered in sorted order. 10% of rows (at least one) are tested.
pub fn csv(text: &str, label_column: Option<&str>, path: &str) -> Result<Data, DataError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    let first: Vec<&str> = lines
        .peek()
        .ok_or_else(|| format_error(path, "the file is empty"))?
        .split(',')
        .map(str::trim)
        .collect();
    let columns = first.len();
    let numeric = |f: &&str| f.parse::<f64>().is_ok();
    // A header names columns: with `label_column`, the first row is one when it holds that name;
    // without, when a feature column (any but the last, the label, which may be a class name as
    // in `5.1,3.5,1.4,0.2,Iris-setosa`) is not a number.
    let (has_header, label_index) = match label_column {
        Some(name) => match first.iter().position(|c| *c == name) {
            Some(index) => (true, index),
            None if first.iter().all(numeric) => {
                return Err(format_error(
                    path,
                    format!(
                        "label_column `{name}` needs a header row naming the columns; the first \
                         row is numbers"
                    ),
                ));
            }
            None => {
                return Err(format_error(
                    path,
                    format!("no column named `{name}` in the header"),
                ));
            }
        },
        None => (
            !first[..columns.saturating_sub(1)].iter().all(numeric),
            columns - 1,
        ),
    };
    if has_header {
        lines.next();
    }
    if columns < 2 {
        return Err(format_error(
            path,
            "need at least one feature and a label column",
        ));
    }
    let mut x = Vec::new();
    let mut raw_labels = Vec::new();
    for (number, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != columns {
            return Err(format_error(
                path,
                format!(
                    "row {} has {} columns, expected {columns}",
                    number + 1,
                    fields.len()
                ),
            ));
        }
        for (i, field) in fields.iter().enumerate() {
            if i == label_index {
                raw_labels.push((*field).to_owned());
            } else {
                let value = field.parse::<f32>().map_err(|_| {
                    format_error(
                        path,
                        format!("row {}: `{field}` is not a number", number + 1),
                    )
                })?;
                if !value.is_finite() {
                    return Err(format_error(
                        path,
                        format!(
                            "row {}: `{field}` is not a finite number (in f32)",
                            number + 1
                        ),
                    ));
                }
                x.push(value);
            }
        }
    }
    let numbered: Option<Vec<u32>> = raw_labels.iter().map(|l| l.parse::<u32>().ok()).collect();
    let y = match numbered {
        Some(y) => y,
        None => {
            let names: BTreeMap<&str, u32> = raw_labels
                .iter()
                .map(String::as_str)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .enumerate()
                .map(|(i, name)| (name, i as u32))
                .collect();
            raw_labels.iter().map(|l| names[l.as_str()]).collect()
        }
    };
    let classes = y.iter().max().map_or(0, |m| *m as usize + 1);
    let dim = columns - 1;
    let test = if path.ends_with("digits/digits.csv") {
        297
    } else {
        (y.len() / 10).max(1)
    };
    if y.len() < 2 {
        return Err(format_error(path, "need at least two rows"));
    }
    let (train, test) = split(x, y, dim, test);
    Ok(Data::Classification(Classification {
        train,
        test,
        input_shape: vec![dim],
        classes,
    }))
}

fn be_u32(bytes: &[u8], at: usize, path: &str) -> Result<u32, DataError> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format_error(path, "truncated header"))
}

/// Images and labels of one IDX pair.
/// Pixels scaled to [0, 1], labels, and the image size.
type IdxPair = (Vec<f32>, Vec<u32>, [usize; 2]);

fn idx_pair(images: &Path, labels: &Path) -> Result<IdxPair, DataError> {
    let image_path = images.display().to_string();
    let label_path = labels.display().to_string();
    let image_bytes = read(images)?;
    let label_bytes = read(labels)?;
    if be_u32(&image_bytes, 0, &image_path)? != 0x0803 {
        return Err(format_error(
            &image_path,
            "not an IDX image file (magic 0x00000803)",
        ));
    }
    if be_u32(&label_bytes, 0, &label_path)? != 0x0801 {
        return Err(format_error(
            &label_path,
            "not an IDX label file (magic 0x00000801)",
        ));
    }
    let n = be_u32(&image_bytes, 4, &image_path)? as usize;
    let h = be_u32(&image_bytes, 8, &image_path)? as usize;
    let w = be_u32(&image_bytes, 12, &image_path)? as usize;
    // The header's sizes are the file's word: multiplied without overflow, and held to its length.
    let count = n
        .checked_mul(h)
        .and_then(|v| v.checked_mul(w))
        .and_then(|v| v.checked_add(16))
        .ok_or_else(|| {
            format_error(
                &image_path,
                format!("a header of {n} images of {h}×{w} pixels is impossibly large"),
            )
        })?;
    if h == 0 || w == 0 {
        return Err(format_error(
            &image_path,
            format!("images of {h}×{w} pixels"),
        ));
    }
    let pixels = image_bytes
        .get(16..count)
        .ok_or_else(|| format_error(&image_path, "fewer pixels than the header says"))?;
    let label_count = be_u32(&label_bytes, 4, &label_path)? as usize;
    if label_count != n {
        return Err(format_error(
            &label_path,
            format!("{label_count} labels for {n} images"),
        ));
    }
    let y = label_bytes
        .get(8..8 + n)
        .ok_or_else(|| format_error(&label_path, "fewer labels than the header says"))?;
    Ok((
        pixels.iter().map(|&p| f32::from(p) / 255.0).collect(),
        y.iter().map(|&l| u32::from(l)).collect(),
        [h, w],
    ))
}

/// A directory with the MNIST file names: `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`.
pub fn idx(dir: &Path) -> Result<Data, DataError> {
    let (train_x, train_y, [h, w]) = idx_pair(
        &dir.join("train-images-idx3-ubyte"),
        &dir.join("train-labels-idx1-ubyte"),
    )?;
    let (test_x, test_y, test_hw) = idx_pair(
        &dir.join("t10k-images-idx3-ubyte"),
        &dir.join("t10k-labels-idx1-ubyte"),
    )?;
    if test_hw != [h, w] {
        return Err(format_error(
            &dir.display().to_string(),
            "train and test images differ in size",
        ));
    }
    let classes = train_y
        .iter()
        .chain(&test_y)
        .max()
        .map_or(0, |m| *m as usize + 1);
    Ok(Data::Classification(Classification {
        train: Split {
            x: train_x,
            y: train_y,
            dim: h * w,
        },
        test: Split {
            x: test_x,
            y: test_y,
            dim: h * w,
        },
        input_shape: vec![1, h, w],
        classes,
    }))
}

/// Characters; the vocabulary is every distinct character, sorted. The last 10% is the test text.
pub fn text(content: &str, path: &str) -> Result<Data, DataError> {
    let chars: Vec<char> = content.chars().collect();
    if chars.len() < 64 {
        return Err(format_error(
            path,
            "too little text to train on (fewer than 64 characters)",
        ));
    }
    let vocab: Vec<char> = chars
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<char, u32> = vocab
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, i as u32))
        .collect();
    let tokens: Vec<u32> = chars.iter().map(|c| index[c]).collect();
    let cut = tokens.len() - tokens.len() / 10;
    Ok(Data::Text(Text {
        vocab,
        train: tokens[..cut].to_vec(),
        test: tokens[cut..].to_vec(),
    }))
}

/// Gaussian clusters around random centroids, one per class.
pub fn synthetic(samples: usize, features: usize, classes: usize, seed: u64) -> Data {
    let mut rng = Rng::derive(seed, 0x5A17);
    let classes = classes.max(2);
    let centroids: Vec<f32> = (0..classes * features)
        .map(|_| 1.5 * rng.normal())
        .collect();
    let mut x = Vec::with_capacity(samples * features);
    let mut y = Vec::with_capacity(samples);
    for i in 0..samples {
        let class = i % classes;
        y.push(class as u32);
        for f in 0..features {
            x.push(centroids[class * features + f] + rng.normal());
        }
    }
    let (train, test) = split(x, y, features, (samples / 10).max(1));
    Data::Classification(Classification {
        train,
        test,
        input_shape: vec![features],
        classes,
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod idx_tests {
    use super::*;

    fn write_idx(dir: &Path, prefix: &str, images: &[[u8; 4]], labels: &[u8]) {
        let mut image_file = vec![0, 0, 8, 3];
        image_file.extend((images.len() as u32).to_be_bytes());
        image_file.extend(2u32.to_be_bytes());
        image_file.extend(2u32.to_be_bytes());
        for image in images {
            image_file.extend(image);
        }
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), image_file).unwrap();
        let mut label_file = vec![0, 0, 8, 1];
        label_file.extend((labels.len() as u32).to_be_bytes());
        label_file.extend(labels);
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), label_file).unwrap();
    }

    #[test]
    fn idx_files_load_as_images_scaled_to_one() {
        let dir = tempfile::tempdir().unwrap();
        write_idx(
            dir.path(),
            "train",
            &[[0, 255, 0, 255], [255, 0, 255, 0], [0, 0, 0, 0]],
            &[1, 2, 0],
        );
        write_idx(dir.path(), "t10k", &[[255, 255, 255, 255]], &[3]);
        let Data::Classification(d) = idx(dir.path()).unwrap() else {
            panic!("images")
        };
        assert_eq!(d.input_shape, [1, 2, 2]);
        assert_eq!((d.train.len(), d.test.len(), d.classes), (3, 1, 4));
        assert_eq!(&d.train.x[..4], &[0.0, 1.0, 0.0, 1.0]);
        assert_eq!(d.test.y, [3]);
        // A truncated file says what is wrong.
        std::fs::write(
            dir.path().join("t10k-labels-idx1-ubyte"),
            [0, 0, 8, 1, 0, 0, 0, 9],
        )
        .unwrap();
        let err = idx(dir.path()).unwrap_err().to_string();
        assert!(err.contains("9 labels for 1 images"), "{err}");
        // A header whose sizes overflow when multiplied is refused, not trusted.
        let mut huge = vec![0, 0, 8, 3];
        for _ in 0..3 {
            huge.extend(u32::MAX.to_be_bytes());
        }
        std::fs::write(dir.path().join("train-images-idx3-ubyte"), &huge).unwrap();
        let err = idx(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("impossibly large") || err.contains("fewer pixels"),
            "{err}"
        );
    }
}
