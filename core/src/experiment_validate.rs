//! Semantic checks of a parsed `DroverExperiment`. Each failure names the field as it appears in the
//! document; the trial template is checked by building a trial from the space's first point.

use crate::experiment::{
    Assignment, Budget, DroverExperiment, EXPERIMENT_KIND, EarlyStopping, Param, SearcherSpec,
    TrialRun, build_trial, is_spec_path,
};
use crate::spec::{API_VERSION, JobType, SpecError};
use crate::validate::validate_name;
use serde_json::Value;
use std::collections::BTreeMap;

type Check = Result<(), SpecError>;

pub use crate::document::MAX_EXPERIMENT_NAME;
pub use crate::experiment::MAX_PARAMETERS;
pub const MAX_CATEGORIES: usize = 256;
pub const MAX_TRIALS: u32 = 10_000;
pub const MAX_CONCURRENT_TRIALS: u32 = 1_000;
pub const MAX_GRID_POINTS: u32 = 100;
/// Trials built from the space's corners to check the template against, at most.
pub const MAX_CHECKED_POINTS: usize = 256;

fn fail(field: &str, reason: impl Into<String>) -> Check {
    Err(SpecError::new(field, reason))
}

fn ensure(ok: bool, field: &str, reason: impl FnOnce() -> String) -> Check {
    if ok { Ok(()) } else { fail(field, reason()) }
}

/// Runs every check; the first failure wins.
pub fn validate(experiment: &DroverExperiment) -> Check {
    ensure(experiment.api_version == API_VERSION, "apiVersion", || {
        format!("must be `{API_VERSION}`, got `{}`", experiment.api_version)
    })?;
    ensure(experiment.kind == EXPERIMENT_KIND, "kind", || {
        format!("must be `{EXPERIMENT_KIND}`, got `{}`", experiment.kind)
    })?;
    let name = &experiment.metadata.name;
    validate_name(name, "metadata.name")?;
    ensure(name.len() <= MAX_EXPERIMENT_NAME, "metadata.name", || {
        format!(
            "must be at most {MAX_EXPERIMENT_NAME} characters (trial names add a suffix), got {}",
            name.len()
        )
    })?;
    if let Some(text) = crate::text::find_nul(&serde_json::to_value(experiment).unwrap_or_default())
    {
        fail(&text, crate::text::NUL_REASON)?;
    }
    let spec = &experiment.spec;
    ensure(
        !spec.metric.name.trim().is_empty(),
        "spec.metric.name",
        || "must name a metric the trials report (e.g. val_accuracy)".into(),
    )?;
    validate_parameters(experiment)?;
    validate_searcher(experiment)?;
    validate_early_stopping(&spec.early_stopping)?;
    // ASHA, Hyperband and PBT stop and continue trials by their own rules; a second rule beside
    // theirs would stop trials they mean to promote.
    if !matches!(spec.early_stopping, EarlyStopping::None)
        && let SearcherSpec::Asha { .. } | SearcherSpec::Hyperband { .. } | SearcherSpec::Pbt { .. } =
            spec.searcher
    {
        fail(
            "spec.early_stopping",
            "only for the grid, random and tpe searchers: asha, hyperband and pbt stop trials by their own rules; remove it",
        )?;
    }
    validate_budget(&spec.budget)?;
    // The template itself, with the space's corners written into it: the first point, then each
    // parameter's extremes (every category) with the others at their first value.
    let max_steps = match spec.searcher {
        SearcherSpec::Asha { min_steps, .. } | SearcherSpec::Hyperband { min_steps, .. } => {
            Some(min_steps)
        }
        SearcherSpec::Pbt { ready_steps, .. } => Some(ready_steps),
        _ => None,
    };
    // At most `MAX_CHECKED_POINTS`, so a large space costs a bounded time to submit.
    let mut points = vec![first_point(&spec.parameters, None)];
    'corners: for (name, param) in &spec.parameters {
        for value in extremes(param) {
            if points.len() >= MAX_CHECKED_POINTS {
                break 'corners;
            }
            points.push(first_point(&spec.parameters, Some((name, value))));
        }
    }
    for point in &points {
        let run = TrialRun {
            name: "trial-check",
            trial: 0,
            params: point,
            max_steps,
            init_from: None,
        };
        build_trial(experiment, &run)?;
    }
    Ok(())
}

fn extremes(param: &Param) -> Vec<Value> {
    match param {
        Param::Const { .. } => Vec::new(),
        Param::Int { min, max, .. } => vec![Value::from(*min), Value::from(*max)],
        Param::Double { min, max, .. } | Param::LogUniform { min, max, .. } => {
            vec![Value::from(*min), Value::from(*max)]
        }
        Param::Categorical { values, .. } => values.clone(),
    }
}

fn validate_parameters(experiment: &DroverExperiment) -> Check {
    let spec = &experiment.spec;
    let params = &spec.parameters;
    ensure(!params.is_empty(), "spec.parameters", || {
        "must name at least one parameter to search".into()
    })?;
    ensure(params.len() <= MAX_PARAMETERS, "spec.parameters", || {
        format!("at most {MAX_PARAMETERS} parameters, got {}", params.len())
    })?;
    let command = spec.trial.job_type == JobType::Command;
    for (name, param) in params {
        let field = format!("spec.parameters.{name}");
        ensure(valid_param_name(name), &field, || {
            "parameter names are letters, digits, '_', '-' and '.' (a dotted path names a field of the \
             trial spec)"
                .into()
        })?;
        ensure(command || is_spec_path(name), &field, || {
            format!(
                "`{name}` is not a field of the trial spec: a train trial's parameters name fields such \
                 as train.optimizer.lr or train.model.hidden"
            )
        })?;
        if spec.searcher.is_multi_fidelity() {
            ensure(
                !matches!(
                    name.as_str(),
                    "train.max_steps"
                        | "command.max_steps"
                        | "train.init_from"
                        | "command.init_from"
                ),
                &field,
                || {
                    format!(
                        "the {} searcher sets max_steps and init_from itself",
                        spec.searcher.name()
                    )
                },
            )?;
        }
        validate_param(param, &field)?;
        if let Some(condition) = param.condition() {
            let cond_field = format!("{field}.when.param");
            let Some(parent) = params.get(&condition.param) else {
                return fail(
                    &cond_field,
                    format!("`{}` is not a parameter of this space", condition.param),
                );
            };
            ensure(condition.param != *name, &cond_field, || {
                "a parameter cannot depend on itself".into()
            })?;
            ensure(
                !condition.one_of.is_empty(),
                &format!("{field}.when.one_of"),
                || "must list at least one value".into(),
            )?;
            if let Param::Categorical { values, .. } = parent {
                for value in &condition.one_of {
                    ensure(
                        values.contains(value),
                        &format!("{field}.when.one_of"),
                        || format!("{value} is not one of `{}`'s values", condition.param),
                    )?;
                }
            }
        }
    }
    // Conditions form no cycle.
    for name in params.keys() {
        let mut seen = vec![name.as_str()];
        let mut at = name.as_str();
        while let Some(parent) = params.get(at).and_then(Param::condition) {
            let field = format!("spec.parameters.{name}.when.param");
            ensure(!seen.contains(&parent.param.as_str()), &field, || {
                "conditions form a cycle".into()
            })?;
            seen.push(&parent.param);
            at = &parent.param;
        }
    }
    Ok(())
}

fn valid_param_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
}

fn validate_param(param: &Param, field: &str) -> Check {
    match param {
        Param::Const { .. } => Ok(()),
        Param::Int { min, max, log, .. } => {
            ensure(min <= max, &format!("{field}.max"), || {
                format!("must be at least min ({min}), got {max}")
            })?;
            ensure(!log || *min >= 1, &format!("{field}.min"), || {
                format!("must be at least 1 when log is true, got {min}")
            })
        }
        Param::Double { min, max, log, .. } => validate_range(*min, *max, *log, field),
        Param::LogUniform { min, max, .. } => validate_range(*min, *max, true, field),
        Param::Categorical { values, .. } => {
            let field = format!("{field}.values");
            ensure(!values.is_empty(), &field, || {
                "must list at least one value".into()
            })?;
            ensure(values.len() <= MAX_CATEGORIES, &field, || {
                format!("at most {MAX_CATEGORIES} values, got {}", values.len())
            })?;
            for (i, value) in values.iter().enumerate() {
                ensure(!values[..i].contains(value), &field, || {
                    format!("{value} is listed twice")
                })?;
            }
            Ok(())
        }
    }
}

fn validate_range(min: f64, max: f64, log: bool, field: &str) -> Check {
    ensure(min.is_finite(), &format!("{field}.min"), || {
        "must be a finite number".into()
    })?;
    ensure(max.is_finite(), &format!("{field}.max"), || {
        "must be a finite number".into()
    })?;
    ensure(min <= max, &format!("{field}.max"), || {
        format!("must be at least min ({min}), got {max}")
    })?;
    ensure(!log || min > 0.0, &format!("{field}.min"), || {
        format!("must be positive on a log scale, got {min}")
    })
}

fn validate_searcher(experiment: &DroverExperiment) -> Check {
    let searcher = &experiment.spec.searcher;
    let field = "spec.searcher";
    match searcher {
        SearcherSpec::Grid { points } => {
            ensure(
                (2..=MAX_GRID_POINTS).contains(points),
                &format!("{field}.points"),
                || format!("must be between 2 and {MAX_GRID_POINTS}, got {points}"),
            )?;
            let size = grid_size(&experiment.spec.parameters, *points);
            ensure(size <= u64::from(MAX_TRIALS), field, || {
                format!(
                    "the grid has {size} points, more than {MAX_TRIALS}: use fewer points or random"
                )
            })
        }
        SearcherSpec::Random {} => Ok(()),
        SearcherSpec::Tpe {
            startup_trials,
            candidates,
        } => {
            ensure(
                *startup_trials >= 1,
                &format!("{field}.startup_trials"),
                || "must be at least 1".into(),
            )?;
            ensure(
                (1..=10_000).contains(candidates),
                &format!("{field}.candidates"),
                || format!("must be between 1 and 10000, got {candidates}"),
            )
        }
        SearcherSpec::Asha {
            min_steps,
            max_steps,
            eta,
        }
        | SearcherSpec::Hyperband {
            min_steps,
            max_steps,
            eta,
        } => {
            ensure(*min_steps >= 1, &format!("{field}.min_steps"), || {
                "must be at least 1".into()
            })?;
            ensure(max_steps > min_steps, &format!("{field}.max_steps"), || {
                format!("must be more than min_steps ({min_steps}), got {max_steps}")
            })?;
            ensure((2..=100).contains(eta), &format!("{field}.eta"), || {
                format!("must be between 2 and 100, got {eta}")
            })
        }
        SearcherSpec::Pbt {
            population,
            ready_steps,
            max_steps,
            quantile,
            perturb,
            resample_probability,
        } => {
            ensure(
                (2..=MAX_CONCURRENT_TRIALS).contains(population),
                &format!("{field}.population"),
                || format!("must be between 2 and {MAX_CONCURRENT_TRIALS}, got {population}"),
            )?;
            ensure(*ready_steps >= 1, &format!("{field}.ready_steps"), || {
                "must be at least 1".into()
            })?;
            ensure(
                max_steps >= ready_steps,
                &format!("{field}.max_steps"),
                || format!("must be at least ready_steps ({ready_steps}), got {max_steps}"),
            )?;
            ensure(
                *quantile > 0.0 && *quantile <= 0.5,
                &format!("{field}.quantile"),
                || format!("must be in (0, 0.5], got {quantile}"),
            )?;
            ensure(!perturb.is_empty(), &format!("{field}.perturb"), || {
                "must list at least one factor".into()
            })?;
            for factor in perturb {
                ensure(
                    factor.is_finite() && *factor > 0.0,
                    &format!("{field}.perturb"),
                    || format!("factors must be positive, got {factor}"),
                )?;
            }
            ensure(
                (0.0..=1.0).contains(resample_probability),
                &format!("{field}.resample_probability"),
                || format!("must be in [0, 1], got {resample_probability}"),
            )
        }
    }
}

fn validate_early_stopping(stopping: &EarlyStopping) -> Check {
    match stopping {
        EarlyStopping::None => Ok(()),
        EarlyStopping::Median { min_trials, .. } => {
            ensure(*min_trials >= 1, "spec.early_stopping.min_trials", || {
                "must be at least 1".into()
            })
        }
        EarlyStopping::Curve {
            min_points,
            min_trials,
        } => {
            ensure(*min_points >= 3, "spec.early_stopping.min_points", || {
                format!("must be at least 3 (a curve has three parameters), got {min_points}")
            })?;
            ensure(*min_trials >= 1, "spec.early_stopping.min_trials", || {
                "must be at least 1".into()
            })
        }
    }
}

fn validate_budget(budget: &Budget) -> Check {
    if let Some(max) = budget.max_trials {
        ensure(
            (1..=MAX_TRIALS).contains(&max),
            "spec.budget.max_trials",
            || format!("must be between 1 and {MAX_TRIALS}, got {max}"),
        )?;
    }
    let concurrent = budget.max_concurrent_trials;
    ensure(
        (1..=MAX_CONCURRENT_TRIALS).contains(&concurrent),
        "spec.budget.max_concurrent_trials",
        || format!("must be between 1 and {MAX_CONCURRENT_TRIALS}, got {concurrent}"),
    )?;
    if let Some(hours) = budget.max_gpu_hours {
        ensure(
            hours.is_finite() && hours > 0.0,
            "spec.budget.max_gpu_hours",
            || format!("must be a positive number, got {hours}"),
        )?;
    }
    Ok(())
}

/// The number of points a grid of `points` per real-valued parameter has (saturating).
pub fn grid_size(params: &BTreeMap<String, Param>, points: u32) -> u64 {
    // Conditional parameters multiply only the branches they live in; counting them as if always
    // present gives an upper bound, which is what a size limit needs.
    params
        .values()
        .map(|param| match param {
            Param::Const { .. } => 1,
            Param::Int { min, max, .. } => {
                let span = max.abs_diff(*min).saturating_add(1);
                span.min(u64::from(points))
            }
            Param::Double { min, max, .. } | Param::LogUniform { min, max, .. } => {
                if min == max {
                    1
                } else {
                    u64::from(points)
                }
            }
            Param::Categorical { values, .. } => values.len() as u64,
        })
        .fold(1u64, u64::saturating_mul)
}

/// The space's first point (lowest values, first categories), conditions respected, with one parameter
/// optionally set to another value: the trials the template is checked with.
pub fn first_point(params: &BTreeMap<String, Param>, set: Option<(&String, Value)>) -> Assignment {
    let mut point = Assignment::new();
    // Parents before children: repeat until nothing more becomes active.
    loop {
        let before = point.len();
        for (name, param) in params {
            if point.contains_key(name) {
                continue;
            }
            let active = match param.condition() {
                None => true,
                Some(condition) => point
                    .get(&condition.param)
                    .is_some_and(|value| condition.one_of.contains(value)),
            };
            if active {
                let value = match &set {
                    Some((set_name, value)) if *set_name == name => value.clone(),
                    _ => lowest(param),
                };
                point.insert(name.clone(), value);
            }
        }
        if point.len() == before {
            return point;
        }
    }
}

fn lowest(param: &Param) -> Value {
    match param {
        Param::Const { value, .. } => value.clone(),
        Param::Int { min, .. } => Value::from(*min),
        Param::Double { min, .. } | Param::LogUniform { min, .. } => Value::from(*min),
        Param::Categorical { values, .. } => values.first().cloned().unwrap_or(Value::Null),
    }
}
