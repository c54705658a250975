//! The search space as the searchers see it: parameters in an order where a condition's parent comes
//! before its children, each mapped to and from the unit interval (real and integer parameters, in log
//! space where asked) or to a category index, plus the grid's enumeration.

use drover_core::experiment::{Assignment, Param};
use rand::Rng;
use serde_json::Value;
use std::collections::BTreeMap;

/// One parameter, named, in sampling order.
#[derive(Debug, Clone)]
pub struct Dim<'a> {
    pub name: &'a str,
    pub param: &'a Param,
}

impl Dim<'_> {
    /// `true` when the parameter exists in a point holding `partial`'s values (its parent's value is one
    /// its condition lists).
    pub fn is_active(&self, partial: &Assignment) -> bool {
        match self.param.condition() {
            None => true,
            Some(condition) => partial
                .get(&condition.param)
                .is_some_and(|value| condition.one_of.contains(value)),
        }
    }

    pub fn is_conditional(&self) -> bool {
        self.param.condition().is_some()
    }

    /// The number of categories, for a categorical parameter.
    pub fn categories(&self) -> Option<usize> {
        match self.param {
            Param::Categorical { values, .. } => Some(values.len()),
            _ => None,
        }
    }

    /// A value drawn uniformly (in log space for log parameters).
    pub fn sample(&self, rng: &mut impl Rng) -> Value {
        match self.param {
            Param::Categorical { values, .. } => values[rng.random_range(0..values.len())].clone(),
            Param::Const { value, .. } => value.clone(),
            _ => self.from_unit(rng.random::<f64>()),
        }
    }

    /// The category index of a value (categorical parameters).
    pub fn category_of(&self, value: &Value) -> Option<usize> {
        match self.param {
            Param::Categorical { values, .. } => values.iter().position(|v| v == value),
            _ => None,
        }
    }

    pub fn category(&self, index: usize) -> Value {
        match self.param {
            Param::Categorical { values, .. } => values[index.min(values.len() - 1)].clone(),
            Param::Const { value, .. } => value.clone(),
            _ => Value::Null,
        }
    }

    /// A numeric value's position in `[0, 1]` (log space for log parameters); `None` for categories,
    /// constants and values that are not numbers.
    pub fn to_unit(&self, value: &Value) -> Option<f64> {
        let x = value.as_f64()?;
        let unit = match *self.param {
            Param::Int { min, max, log, .. } => {
                let (lo, hi) = (min as f64 - 0.5, max as f64 + 0.5);
                if log {
                    let lo = (min as f64 - 0.5).max(0.5);
                    ((x.max(lo)).ln() - lo.ln()) / (hi.ln() - lo.ln())
                } else {
                    (x - lo) / (hi - lo)
                }
            }
            Param::Double { min, max, log, .. } => unit_of(x, min, max, log),
            Param::LogUniform { min, max, .. } => unit_of(x, min, max, true),
            _ => return None,
        };
        Some(unit.clamp(0.0, 1.0))
    }

    /// The value at position `u` of `[0, 1]`, rounded for integers.
    pub fn from_unit(&self, u: f64) -> Value {
        let u = u.clamp(0.0, 1.0);
        match *self.param {
            Param::Int { min, max, log, .. } => {
                let (lo, hi) = (min as f64 - 0.5, max as f64 + 0.5);
                let x = if log {
                    let lo = (min as f64 - 0.5).max(0.5);
                    (lo.ln() + u * (hi.ln() - lo.ln())).exp()
                } else {
                    lo + u * (hi - lo)
                };
                Value::from((x.round() as i64).clamp(min, max))
            }
            Param::Double { min, max, log, .. } => Value::from(value_of(u, min, max, log)),
            Param::LogUniform { min, max, .. } => Value::from(value_of(u, min, max, true)),
            Param::Categorical { .. } | Param::Const { .. } => self.category(0),
        }
    }
}

fn unit_of(x: f64, min: f64, max: f64, log: bool) -> f64 {
    if max <= min {
        return 0.5;
    }
    if log {
        (x.max(min).ln() - min.ln()) / (max.ln() - min.ln())
    } else {
        (x - min) / (max - min)
    }
}

fn value_of(u: f64, min: f64, max: f64, log: bool) -> f64 {
    let x = if log {
        (min.ln() + u * (max.ln() - min.ln())).exp()
    } else {
        min + u * (max - min)
    };
    x.clamp(min, max)
}

/// The parameters in sampling order: every condition's parent before the parameters it governs, ties
/// by name (the spec's validation has ruled out cycles and unknown parents).
pub fn dims(params: &BTreeMap<String, Param>) -> Vec<Dim<'_>> {
    let mut ordered: Vec<Dim<'_>> = Vec::with_capacity(params.len());
    while ordered.len() < params.len() {
        let before = ordered.len();
        for (name, param) in params {
            if ordered.iter().any(|dim| dim.name == name) {
                continue;
            }
            let ready = param
                .condition()
                .is_none_or(|condition| ordered.iter().any(|dim| dim.name == condition.param));
            if ready {
                ordered.push(Dim { name, param });
            }
        }
        if ordered.len() == before {
            // A cycle or a missing parent: validation refuses these; sample the rest unconditionally.
            for (name, param) in params {
                if !ordered.iter().any(|dim| dim.name == name) {
                    ordered.push(Dim { name, param });
                }
            }
        }
    }
    ordered
}

/// A point drawn uniformly, conditions respected.
pub fn sample(dims: &[Dim<'_>], rng: &mut impl Rng) -> Assignment {
    let mut point = Assignment::new();
    for dim in dims {
        if dim.is_active(&point) {
            point.insert(dim.name.to_owned(), dim.sample(rng));
        }
    }
    point
}

/// Every point of the grid, in a fixed order (the first parameter varies slowest); real parameters
/// take `points` evenly spaced values, integers at most `points` distinct values, and a conditional
/// parameter varies only where it is active, so no point appears twice.
pub fn grid(dims: &[Dim<'_>], points: u32) -> Vec<Assignment> {
    let mut out = vec![Assignment::new()];
    for dim in dims {
        let values = grid_values(dim, points);
        let mut next = Vec::with_capacity(out.len() * values.len());
        for point in out {
            if !dim.is_active(&point) {
                next.push(point);
                continue;
            }
            for value in &values {
                let mut extended = point.clone();
                extended.insert(dim.name.to_owned(), value.clone());
                next.push(extended);
            }
        }
        out = next;
    }
    out
}

fn grid_values(dim: &Dim<'_>, points: u32) -> Vec<Value> {
    let points = points.max(2);
    match *dim.param {
        Param::Const { ref value, .. } => vec![value.clone()],
        Param::Categorical { ref values, .. } => values.clone(),
        Param::Int { min, max, log, .. } => {
            let span = max.abs_diff(min) + 1;
            if span <= u64::from(points) {
                return (min..=max).map(Value::from).collect();
            }
            let mut values: Vec<i64> = (0..points)
                .map(|i| {
                    let u = f64::from(i) / f64::from(points - 1);
                    let x = if log {
                        ((min as f64).ln() + u * ((max as f64).ln() - (min as f64).ln())).exp()
                    } else {
                        min as f64 + u * (max - min) as f64
                    };
                    (x.round() as i64).clamp(min, max)
                })
                .collect();
            values.dedup();
            values.into_iter().map(Value::from).collect()
        }
        Param::Double { min, max, log, .. } => real_grid(min, max, log, points),
        Param::LogUniform { min, max, .. } => real_grid(min, max, true, points),
    }
}

fn real_grid(min: f64, max: f64, log: bool, points: u32) -> Vec<Value> {
    if max <= min {
        return vec![Value::from(min)];
    }
    (0..points)
        .map(|i| {
            Value::from(value_of(
                f64::from(i) / f64::from(points - 1),
                min,
                max,
                log,
            ))
        })
        .collect()
}
