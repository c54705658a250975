//! The API's one error type. Every failure leaves as `{"error": {"code", "message", "field"?}}` with a
//! 4xx that says what the client got wrong, or a generic 5xx whose cause is logged once, where it
//! happened. The service's errors ([`ServiceError`]) map to a status by their kind.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_core::SpecError;
use drover_service::{ErrorKind, ServiceError};
use drover_store::StoreError;
use serde::Serialize;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

/// The JSON body of every error.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `invalid_spec`, `not_found`, `unauthenticated`, …
    pub code: &'static str,
    pub message: String,
    /// The offending field, as a dotted path into the request, when one is to blame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn bad_request(field: &str, message: impl Into<String>) -> Self {
        ServiceError::bad_request(field, message).into()
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ServiceError::invalid(field, message).into()
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ServiceError::unauthenticated(message).into()
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ServiceError::forbidden(message).into()
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        ServiceError::not_found(what).into()
    }

    pub fn internal() -> Self {
        ServiceError::internal().into()
    }

    /// A store error on a lookup of `what`; missing rows become 404 with that name.
    pub fn from_store(err: StoreError, what: impl FnOnce() -> String) -> Self {
        ServiceError::from_store(err, what).into()
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        let status = match err.kind {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::TooMany => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self {
            status,
            code: err.code,
            message: err.message,
            field: err.field,
        }
    }
}

impl From<SpecError> for ApiError {
    fn from(err: SpecError) -> Self {
        ServiceError::from(err).into()
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ServiceError::from(err).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthenticated = self.status == StatusCode::UNAUTHORIZED;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                field: self.field,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if unauthenticated {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A page a browser asks for (outside `/api/`, accepting HTML) and no route serves: a page saying so,
/// with the way back; anything else the API's JSON error.
const NOT_FOUND_PAGE: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Not found · Drover</title>\
<link rel=\"stylesheet\" href=\"/static/app.css\"></head><body><main><h1>Not found</h1>\
<p>No page is at this address.</p><p><a href=\"/\">Back to the dashboard</a></p></main></body></html>";

pub async fn not_found(uri: axum::http::Uri, headers: axum::http::HeaderMap) -> Response {
    use axum::response::IntoResponse;
    let wants_html = !uri.path().starts_with("/api/")
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/html"));
    if wants_html {
        (StatusCode::NOT_FOUND, axum::response::Html(NOT_FOUND_PAGE)).into_response()
    } else {
        ApiError::not_found("no such route").into_response()
    }
}
