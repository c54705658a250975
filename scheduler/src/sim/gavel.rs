//! Measured throughput per GPU model (`data/models/gavel_throughputs.json`, from the Gavel artifact):
//! what makes a simulated job faster on one model than another on a heterogeneous cluster. Each trace
//! job is given one of the table's 26 job types (a seeded draw); its true speed on a model is its
//! speed on its best model of the cluster times the table's ratio of the two, at the number of GPUs
//! it was recorded with (1, 2, 4 or 8; consolidated). Only jobs' speed alone on their GPUs is read:
//! packing interference keeps its own model ([`super::Interference`]).

use std::collections::BTreeMap;

/// Scales the table measures a job type at.
const SCALES: [u32; 4] = [1, 2, 4, 8];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GavelError {
    #[error("the throughput table is not JSON: {0}")]
    Json(String),
    #[error("the throughput table has no model {0}")]
    MissingModel(String),
    #[error("the throughput table's entry `{0}` is not `('job type', GPUs)`")]
    BadKey(String),
}

/// Steps per second of each job type at each scale, per GPU model (consolidated placements).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GavelTable {
    /// model (lower case) -> (job type, scale) -> steps/s alone.
    models: BTreeMap<String, BTreeMap<(String, u32), f64>>,
}

impl GavelTable {
    /// Parses the artifact's JSON: `{ model: { "('job type', gpus)": { "null": steps/s, ... } } }`.
    /// The `*_unconsolidated` models and the co-location entries are not read.
    pub fn parse(text: &str) -> Result<GavelTable, GavelError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| GavelError::Json(e.to_string()))?;
        let top = value
            .as_object()
            .ok_or_else(|| GavelError::Json("the top level is not an object".to_owned()))?;
        let mut models = BTreeMap::new();
        for (model, jobs) in top {
            if model.ends_with("_unconsolidated") {
                continue;
            }
            let Some(jobs) = jobs.as_object() else {
                continue;
            };
            let mut table = BTreeMap::new();
            for (key, entry) in jobs {
                let Some(alone) = entry.get("null").and_then(serde_json::Value::as_f64) else {
                    continue;
                };
                table.insert(parse_key(key)?, alone);
            }
            models.insert(model.to_ascii_lowercase(), table);
        }
        Ok(GavelTable { models })
    }

    /// The models it measures, in order.
    pub fn models(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }

    /// Whether it measures the GPU model named `name` (case aside).
    pub fn knows(&self, name: &str) -> bool {
        self.models.contains_key(&name.to_ascii_lowercase())
    }

    /// Steps per second of `job_type` on `scale` GPUs of `model`, alone.
    pub fn steps_per_s(&self, model: &str, job_type: &str, scale: u32) -> Option<f64> {
        self.models
            .get(&model.to_ascii_lowercase())?
            .get(&(job_type.to_owned(), scale))
            .copied()
    }

    /// The job types measured at `scale` with a non-zero throughput on every one of `models` (a type
    /// that does not fit in one model's memory at that scale has none there).
    pub fn job_types_for(&self, models: &[String], scale: u32) -> Vec<String> {
        let Some(first) = self.models.values().next() else {
            return Vec::new();
        };
        first
            .keys()
            .filter(|(_, s)| *s == scale)
            .map(|(job, _)| job.clone())
            .filter(|job| {
                models.iter().all(|model| {
                    self.steps_per_s(model, job, scale)
                        .is_some_and(|speed| speed > 0.0)
                })
            })
            .collect()
    }

    /// Relative speed of `job_type` at `scale` on each of `models`: 1 on the fastest of them, the
    /// ratio of measured throughputs on the others.
    pub fn relative_speeds(&self, models: &[String], job_type: &str, scale: u32) -> Vec<f64> {
        let speeds: Vec<f64> = models
            .iter()
            .map(|m| self.steps_per_s(m, job_type, scale).unwrap_or(0.0))
            .collect();
        let best = speeds.iter().copied().fold(0.0, f64::max);
        if best <= 0.0 {
            return vec![1.0; models.len()];
        }
        speeds.iter().map(|s| s / best).collect()
    }
}

/// The table's scale for a job recorded on `gpus` GPUs: the largest measured one not above it.
pub fn scale_for(gpus: u32) -> u32 {
    SCALES
        .iter()
        .copied()
        .filter(|&s| s <= gpus.max(1))
        .max()
        .unwrap_or(1)
}

/// `('ResNet-50 (batch size 64)', 2)` -> (`ResNet-50 (batch size 64)`, 2).
fn parse_key(key: &str) -> Result<(String, u32), GavelError> {
    let bad = || GavelError::BadKey(key.to_owned());
    let inner = key
        .trim()
        .strip_prefix("('")
        .and_then(|k| k.strip_suffix(')'))
        .ok_or_else(bad)?;
    let (name, scale) = inner.rsplit_once("',").ok_or_else(bad)?;
    let scale = scale.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((name.to_owned(), scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_artifact_table() {
        let text = include_str!("../../../data/models/gavel_throughputs.json");
        let table = GavelTable::parse(text).unwrap();
        assert_eq!(table.models(), ["k80", "p100", "v100"]);
        let v100 = table
            .steps_per_s("V100", "ResNet-50 (batch size 64)", 1)
            .unwrap();
        assert!((v100 - 4.39).abs() < 0.01, "{v100}");
        let models = ["v100".to_owned(), "p100".to_owned(), "k80".to_owned()];
        // ResNet-50 at batch 128 does not fit on two K80s.
        let types = table.job_types_for(&models, 2);
        assert!(!types.iter().any(|t| t == "ResNet-50 (batch size 128)"));
        assert_eq!(table.job_types_for(&models, 1).len(), 26);
        // Recommendation runs fastest on P100s.
        let speeds = table.relative_speeds(&models, "Recommendation (batch size 512)", 1);
        assert_eq!(speeds[1], 1.0);
        assert!(speeds[0] < 0.5 && speeds[2] < 0.7, "{speeds:?}");
        assert_eq!(scale_for(3), 2);
        assert_eq!(scale_for(64), 8);
        assert!(GavelTable::parse("{\"v100\": {\"nonsense\": {\"null\": 1}}}").is_err());
    }
}
