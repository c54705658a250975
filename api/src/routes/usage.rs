//! Accounting: GPU-hours allocated, used by training that was kept, and lost by cause, per tenant,
//! user or job and per day or week; and fair share made visible (each tenant's guaranteed, held,
//! borrowed and lent GPUs). JSON, or CSV with `format=csv`.

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::QueryPairs;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use drover_runtime::accounting::Period;
use drover_service::auth::Principal;
use drover_service::usage::{By, CAUSES, MAX_WINDOW_DAYS, Usage, UsageRow, report};

fn parse_instant(field: &str, raw: &str) -> ApiResult<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(at.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .ok_or_else(|| {
            ApiError::bad_request(
                field,
                format!("`{raw}` is neither a date (2026-11-01) nor an RFC 3339 time"),
            )
        })
}

/// GPU-hours allocated, used and lost by cause.
#[utoipa::path(
    get, path = "/api/v1/usage", tag = "tenants",
    params(
        ("from" = Option<String>, Query, description = "Window start: a date (`2026-11-01`, UTC midnight) or an RFC 3339 time; default seven days ago"),
        ("to" = Option<String>, Query, description = "Window end (exclusive); default now"),
        ("by" = Option<String>, Query, description = "`tenant` (default), `user` or `job`"),
        ("period" = Option<String>, Query, description = "`day`, `week` or `total` (default)"),
        ("tenant" = Option<String>, Query, description = "Cluster administrators: only this tenant; others see their own tenant only"),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv`"),
    ),
    responses(
        (status = 200, body = Usage, description = "JSON, or `text/csv` with `format=csv`"),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn usage(
    State(state): State<AppState>,
    principal: Principal,
    query: QueryPairs,
) -> ApiResult<Response> {
    query.only(&["from", "to", "by", "period", "tenant", "format"])?;
    let now = Utc::now();
    let to = query
        .get("to")
        .map(|raw| parse_instant("to", raw))
        .transpose()?
        .unwrap_or(now);
    let from = query
        .get("from")
        .map(|raw| parse_instant("from", raw))
        .transpose()?
        .unwrap_or(to - Duration::days(7));
    if from >= to {
        return Err(ApiError::bad_request("from", "must be before `to`"));
    }
    if to - from > Duration::days(MAX_WINDOW_DAYS) {
        return Err(ApiError::bad_request(
            "from",
            format!("the window may span at most {MAX_WINDOW_DAYS} days"),
        ));
    }
    let by = match query.get("by").unwrap_or("tenant") {
        "tenant" => By::Tenant,
        "user" => By::User,
        "job" => By::Job,
        other => {
            return Err(ApiError::bad_request(
                "by",
                format!("`{other}`: expected tenant, user or job"),
            ));
        }
    };
    let period = match query.get("period").unwrap_or("total") {
        "day" => Period::Day,
        "week" => Period::Week,
        "total" => Period::Total,
        other => {
            return Err(ApiError::bad_request(
                "period",
                format!("`{other}`: expected day, week or total"),
            ));
        }
    };
    let csv = match query.get("format").unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => {
            return Err(ApiError::bad_request(
                "format",
                format!("`{other}`: expected json or csv"),
            ));
        }
    };
    let scope =
        drover_service::auth::tenant_scope(&state, &principal, query.get("tenant"), "usage")
            .await?;
    let usage = report(&state, scope, from, to, by, period).await?;
    if csv {
        return Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"drover-usage.csv\"",
                ),
            ],
            to_csv(&usage.rows),
        )
            .into_response());
    }
    Ok(Json(usage).into_response())
}

fn to_csv(rows: &[UsageRow]) -> String {
    let mut out = String::from(
        "period_start,tenant,user,job_id,job,allocated_gpu_hours,used_gpu_hours,lost_gpu_hours",
    );
    for cause in CAUSES {
        out.push_str(",lost_");
        out.push_str(cause);
    }
    out.push('\n');
    let field = |text: &str| {
        if text.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_owned()
        }
    };
    for row in rows {
        let t = &row.totals;
        out.push_str(&format!(
            "{},{},{},{},{},{:.6},{:.6},{:.6}",
            row.period_start.to_rfc3339(),
            field(&row.tenant),
            field(row.user.as_deref().unwrap_or("")),
            row.job_id.map(|id| id.to_string()).unwrap_or_default(),
            field(row.job.as_deref().unwrap_or("")),
            t.allocated_gpu_hours,
            t.used_gpu_hours,
            t.lost_gpu_hours,
        ));
        for cause in CAUSES {
            out.push_str(&format!(
                ",{:.6}",
                t.lost_by_cause.get(cause).copied().unwrap_or(0.0)
            ));
        }
        out.push('\n');
    }
    out
}
