//! Where an axis puts its ticks and how a number is written on it or in a tooltip, for every chart
//! the crate draws; and text escaped for SVG.

/// Round tick values covering `[lo, hi]`, about `count` of them.
pub(crate) fn ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return vec![lo];
    }
    let raw = span / count as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= count as f64)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Ticks of a log axis, in log10 units between `lo` and `hi`: the powers of ten; where fewer than
/// two fall inside, also 2× and 5× them; within a factor of a few, round values between the ends.
/// Each is labelled with its value, never its exponent.
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let within = |t: &f64| (lo..=hi).contains(t);
    let decades: Vec<f64> = (lo.floor() as i64..=hi.ceil() as i64)
        .map(|e| e as f64)
        .filter(within)
        .collect();
    if decades.len() >= 2 {
        return decades;
    }
    let steps: Vec<f64> = (lo.floor() as i64..=hi.ceil() as i64)
        .flat_map(|e| [1.0f64, 2.0, 5.0].map(|m| e as f64 + m.log10()))
        .filter(within)
        .collect();
    if steps.len() >= 2 {
        return steps;
    }
    ticks(10f64.powf(lo), 10f64.powf(hi), 4)
        .into_iter()
        .filter(|v| *v > 0.0)
        .map(f64::log10)
        .filter(within)
        .collect()
}

/// A value as a tooltip says it: 4 significant digits, scientific far from 1.
pub(crate) fn precise(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 {
        "0".to_owned()
    } else if !(1e-4..1e7).contains(&magnitude) {
        format!("{value:.3e}")
    } else {
        let decimals = (3 - magnitude.log10().floor() as i32).clamp(0, 8) as usize;
        let text = format!("{value:.decimals$}");
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            text
        }
    }
}

/// A tick's label: round numbers without trailing zeros (`0.5`, `0.001`, `12.25`), far ones in
/// scientific notation.
pub(crate) fn number(value: f64) -> String {
    let magnitude = value.abs();
    let text = if value == 0.0 {
        return "0".to_owned();
    } else if !(1e-3..1e6).contains(&magnitude) {
        return format!("{value:.1e}");
    } else if magnitude >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
