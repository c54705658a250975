//! The router: every route of API v1 in one place, plus health, metrics and the OpenAPI document.

pub mod audit;
pub mod download;
pub mod enrollment;
pub mod experiments;
pub mod health;
pub mod job_actions;
pub mod jobs;
pub mod logs;
pub mod nodes;
pub mod queue;
pub mod resize;
pub mod runs;
pub mod secrets;
pub mod sso;
pub mod tenants;
pub mod tokens;
pub mod usage;
pub mod usage_metrics;
pub mod users;

use crate::error::ApiError;
use crate::request_metrics;
use crate::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Drover API", description = "Multi-tenant GPU cluster scheduler and training job manager"),
    paths(
        health::healthz, health::readyz, health::metrics,
        jobs::submit, jobs::list, jobs::get, job_actions::cancel, job_actions::pause, job_actions::resume, jobs::events, resize::resize, queue::list,
        experiments::submit, experiments::list, experiments::get, experiments::trials, experiments::events,
        experiments::pause, experiments::resume, experiments::cancel,
        runs::tasks, runs::request_checkpoint, runs::metrics, runs::checkpoints, download::download, logs::logs,
        tenants::create, tenants::list, tenants::get, tenants::set_quota, usage::usage, usage_metrics::metrics,
        users::create, users::list, users::get, users::me,
        tokens::create, tokens::list, tokens::revoke,
        nodes::list, nodes::get, nodes::cordon, nodes::uncordon, nodes::drain,
        enrollment::create, enrollment::list, enrollment::revoke, enrollment::revoke_node,
        enrollment::gateway_authority,
        secrets::set, secrets::list, secrets::delete,
        audit::list,
        sso::describe, sso::exchange,
    ),
    // Referred to by name from the schemas `drover_core::openapi` writes by hand.
    components(schemas(
        drover_core::experiment::Param,
        drover_core::spec::EnvValue,
        drover_core::spec::ObjectMeta,
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "jobs", description = "Training and command jobs"),
        (name = "experiments", description = "Hyper-parameter searches: trials are jobs the searcher starts"),
        (name = "tenants", description = "Teams and their GPU quotas"),
        (name = "users", description = "Users and their roles"),
        (name = "tokens", description = "API tokens"),
        (name = "secrets", description = "Tenant secrets, sealed at rest, handed only to tasks"),
        (name = "nodes", description = "GPU nodes, and the enrolment of their executors"),
        (name = "audit", description = "The log of privileged actions"),
        (name = "health", description = "Liveness, readiness, metrics"),
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        drover_core::openapi::complete(components);
        document_common_errors(openapi);
    }
}

/// The answers every operation of a kind can give, added to each so that no annotation can forget
/// them: 401, 429 and 503 wherever a token is needed (finding it reads the database), 400 wherever a
/// body, a query string or a path segment is read, 413 wherever a body is.
fn document_common_errors(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::{
        ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, RefOr, ResponseBuilder, Type,
    };
    let error = |description: &str| {
        ResponseBuilder::new().description(description).content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
    };
    let retry_after = HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::Integer))
        .description(Some("Seconds to wait before retrying"))
        .build();
    for item in openapi.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            let responses = &mut operation.responses.responses;
            let mut add = |status: &str, response: utoipa::openapi::Response| {
                responses
                    .entry(status.to_owned())
                    .or_insert(RefOr::T(response));
            };
            let needs_token = operation
                .security
                .as_ref()
                .is_some_and(|requirements| !requirements.is_empty());
            if needs_token {
                add(
                    "401",
                    error("No token, or an unknown, expired or revoked one").build(),
                );
                add(
                    "429",
                    error("Too many requests with this token (or, submitting a job, too many waiting jobs in the tenant)")
                        .header("Retry-After", retry_after.clone())
                        .build(),
                );
                add(
                    "503",
                    error("The database is overloaded or did not answer in time, or another dependency of the operation cannot answer now; retry").build(),
                );
            }
            let reads_query = operation.parameters.iter().flatten().any(|parameter| {
                matches!(
                    parameter.parameter_in,
                    ParameterIn::Query | ParameterIn::Path
                )
            });
            if operation.request_body.is_some() || reads_query {
                add(
                    "400",
                    error("A malformed body, query parameter or path segment").build(),
                );
            }
            if operation.request_body.is_some() {
                add(
                    "413",
                    error("The body exceeds the server's limit (`drover server --max-body-bytes`)")
                        .build(),
                );
            }
        }
    }
}

/// The whole HTTP application; tests drive it in-process.
pub fn app(state: AppState) -> Router {
    app_with(state, Router::new())
}

/// The HTTP application with `pages` (the dashboard) served beside the API, under the same limits.
pub fn app_with(state: AppState, pages: Router<AppState>) -> Router {
    let max_body_bytes = state.max_body_bytes;
    let api = Router::new()
        .route("/api/v1/jobs", post(jobs::submit).get(jobs::list))
        .route("/api/v1/jobs/{id}", get(jobs::get))
        .route("/api/v1/jobs/{id}/cancel", post(job_actions::cancel))
        .route("/api/v1/jobs/{id}/pause", post(job_actions::pause))
        .route("/api/v1/jobs/{id}/resume", post(job_actions::resume))
        .route("/api/v1/jobs/{id}/resize", post(resize::resize))
        .route("/api/v1/jobs/{id}/events", get(jobs::events))
        .route("/api/v1/jobs/{id}/tasks", get(runs::tasks))
        .route("/api/v1/jobs/{id}/metrics", get(runs::metrics))
        .route("/api/v1/jobs/{id}/checkpoints", get(runs::checkpoints))
        .route(
            "/api/v1/jobs/{id}/checkpoint",
            post(runs::request_checkpoint),
        )
        .route(
            "/api/v1/jobs/{id}/checkpoints/{checkpoint}/download",
            get(download::download),
        )
        .route("/api/v1/jobs/{id}/logs", get(logs::logs))
        .route("/api/v1/queue", get(queue::list))
        .route(
            "/api/v1/experiments",
            post(experiments::submit).get(experiments::list),
        )
        .route("/api/v1/experiments/{id}", get(experiments::get))
        .route("/api/v1/experiments/{id}/trials", get(experiments::trials))
        .route("/api/v1/experiments/{id}/events", get(experiments::events))
        .route("/api/v1/experiments/{id}/pause", post(experiments::pause))
        .route("/api/v1/experiments/{id}/resume", post(experiments::resume))
        .route("/api/v1/experiments/{id}/cancel", post(experiments::cancel))
        .route("/api/v1/usage", get(usage::usage))
        .route("/api/v1/usage/metrics", get(usage_metrics::metrics))
        .route("/api/v1/tenants", post(tenants::create).get(tenants::list))
        .route("/api/v1/tenants/{name}", get(tenants::get))
        .route("/api/v1/tenants/{name}/quota", put(tenants::set_quota))
        .route("/api/v1/users", post(users::create).get(users::list))
        .route("/api/v1/users/{id}", get(users::get))
        .route("/api/v1/me", get(users::me))
        .route("/api/v1/tokens", post(tokens::create).get(tokens::list))
        .route("/api/v1/tokens/{id}", axum::routing::delete(tokens::revoke))
        .route("/api/v1/secrets", get(secrets::list))
        .route(
            "/api/v1/secrets/{name}",
            put(secrets::set).delete(secrets::delete),
        )
        .route("/api/v1/nodes", get(nodes::list))
        .route("/api/v1/nodes/{name}", get(nodes::get))
        .route("/api/v1/nodes/{name}/cordon", post(nodes::cordon))
        .route("/api/v1/nodes/{name}/uncordon", post(nodes::uncordon))
        .route("/api/v1/nodes/{name}/drain", post(nodes::drain))
        .route("/api/v1/nodes/{name}/revoke", post(enrollment::revoke_node))
        .route(
            "/api/v1/enrollment-tokens",
            post(enrollment::create).get(enrollment::list),
        )
        .route(
            "/api/v1/enrollment-tokens/{id}",
            axum::routing::delete(enrollment::revoke),
        )
        .route(
            "/api/v1/gateway-authority",
            get(enrollment::gateway_authority),
        )
        .route("/api/v1/audit", get(audit::list))
        .route("/api/v1/auth/sso", get(sso::describe))
        .route("/api/v1/auth/sso/token", post(sso::exchange))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics));
    Router::new()
        .merge(
            utoipa_swagger_ui::SwaggerUi::new("/api/v1/docs")
                .url("/api/v1/openapi.json", ApiDoc::openapi()),
        )
        .merge(api)
        .merge(pages)
        .fallback(crate::error::not_found)
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not accept that method",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::middleware::limit_requests,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            request_metrics::track,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(ApiError::internal())
        }))
        .with_state(state)
}
