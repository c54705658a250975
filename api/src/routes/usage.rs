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
use serde::Deserialize;
use serde::de::IntoDeserializer;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::{KnownFormat, RefOr};

/// A window's end: a date (`2026-11-01`, UTC midnight) or an RFC 3339 time.
#[derive(Debug)]
pub struct Instant;

impl ToSchema for Instant {}

impl utoipa::PartialSchema for Instant {
    fn schema() -> RefOr<Schema> {
        let string = |format| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(format)))
        };
        OneOfBuilder::new()
            .item(string(KnownFormat::Date))
            .item(string(KnownFormat::DateTime))
            .description(Some(
                "A date (`2026-11-01`, UTC midnight) or an RFC 3339 time",
            ))
            .into()
    }
}

/// How the rows are grouped (`by`).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Grouping {
    Tenant,
    User,
    Job,
}

/// The rows' periods (`period`).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Periods {
    Day,
    Week,
    Total,
}

/// What the answer is written in (`format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UsageFormat {
    Json,
    Csv,
}

/// The value of query parameter `field`, one of `T`'s words; `default` when absent.
fn choice<'de, T: Deserialize<'de>>(
    query: &'de QueryPairs,
    field: &str,
    default: T,
) -> ApiResult<T> {
    match query.get(field) {
        None => Ok(default),
        Some(raw) => T::deserialize(raw.into_deserializer())
            .map_err(|err: serde::de::value::Error| ApiError::bad_request(field, err.to_string())),
    }
}

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
///
/// The window is a rule across `from` and `to` (a 422): `from` is before `to`, and the window spans
/// at most 400 days (`to` is now when absent, `from` seven days before `to`).
#[utoipa::path(
    get, path = "/api/v1/usage", tag = "tenants",
    params(
        ("from" = inline(Option<Instant>), Query, description = "Window start: a date (`2026-11-01`, UTC midnight) or an RFC 3339 time; default seven days before `to`"),
        ("to" = inline(Option<Instant>), Query, description = "Window end (exclusive), a date or an RFC 3339 time; default now"),
        ("by" = inline(Option<Grouping>), Query, description = "`tenant` (default), `user` or `job`"),
        ("period" = inline(Option<Periods>), Query, description = "`day`, `week` or `total` (default)"),
        ("tenant" = Option<String>, Query, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
         description = "Only this tenant: cluster administrators any tenant, others their own only"),
        ("format" = inline(Option<UsageFormat>), Query, description = "`json` (default) or `csv`"),
    ),
    responses(
        (status = 200, description = "JSON, or CSV with `format=csv` (a header line, then a line per row)",
         content((Usage = "application/json"), (String = "text/csv"))),
        (status = 403, description = "Another tenant (`tenant`), for anyone but a cluster administrator", body = ErrorBody),
        (status = 404, description = "No such tenant (`tenant`), for a cluster administrator", body = ErrorBody),
        (status = 422, description = "`from` is not before `to`, or the window spans more than 400 days", body = ErrorBody),
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
    let from = match query.get("from") {
        Some(raw) => parse_instant("from", raw)?,
        None => to
            .checked_sub_signed(Duration::days(7))
            .ok_or_else(|| ApiError::bad_request("to", "too early for a window before it"))?,
    };
    // Each bound is well-formed; together they are a window the report can read, or a 422.
    if from >= to {
        return Err(ApiError::invalid("from", "must be before `to`"));
    }
    if to.signed_duration_since(from) > Duration::days(MAX_WINDOW_DAYS) {
        return Err(ApiError::invalid(
            "from",
            format!("the window may span at most {MAX_WINDOW_DAYS} days"),
        ));
    }
    let by = match choice(&query, "by", Grouping::Tenant)? {
        Grouping::Tenant => By::Tenant,
        Grouping::User => By::User,
        Grouping::Job => By::Job,
    };
    let period = match choice(&query, "period", Periods::Total)? {
        Periods::Day => Period::Day,
        Periods::Week => Period::Week,
        Periods::Total => Period::Total,
    };
    let csv = choice(&query, "format", UsageFormat::Json)? == UsageFormat::Csv;
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
