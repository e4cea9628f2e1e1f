//! The routes: each endpoint's handler (token, body, the operation on the [`Gateway`],
//! off the async workers where it may block), health and metrics, and the router that
//! puts them together behind the limits.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;

use super::errors::{id, ok, parse, parse_required, Reply};
use super::limits::{json_errors, Limits};
use super::spec::openapi;
use crate::api::AdmittedQuery;
use crate::auth::{Caller, Role};
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::metrics::Metrics;

pub(super) type Gw = State<Arc<Gateway>>;

fn caller(g: &Gateway, headers: &HeaderMap, role: Option<Role>) -> Result<Caller, RequestError> {
    let h = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match role {
        Some(role) => g.auth.check(h, role),
        None => g.auth.check_any(h),
    }
}

/// Runs blocking work (durable appends, synced journal writes) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RequestError> + Send + 'static,
) -> Result<T, RequestError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RequestError::unavailable(format!("request task failed: {e}")))?
}

async fn start_episode(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    ok(&g.start_episode(&c, parse(&body)?)?)
}

async fn get_episode(State(g): Gw, Path(e): Path<String>, headers: HeaderMap) -> Reply {
    let c = caller(&g, &headers, None)?;
    ok(&g.episode(&c, id(&e, "episode")?)?)
}

async fn act(State(g): Gw, Path(e): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    ok(&g.act(&c, id(&e, "episode")?, parse_required(&body)?)?)
}

async fn end_episode(State(g): Gw, Path(e): Path<String>, headers: HeaderMap) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    let e = id(&e, "episode")?;
    ok(&blocking(move || g.end_episode(&c, e)).await?)
}

async fn recheck(State(g): Gw, Path(a): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    let (a, req) = (id(&a, "action")?, parse(&body)?);
    // A view that still matches needs no write: answered here, without a blocking thread.
    if let Some(answer) = g.recheck_in_memory(&c, a, &req)? {
        return ok(&answer);
    }
    ok(&blocking(move || g.recheck(&c, a, req)).await?)
}

async fn report(State(g): Gw, Path(a): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    let (a, req) = (id(&a, "action")?, parse_required(&body)?);
    // Its own task: it runs to its end even if the agent hangs up while the sample is
    // being made durable (the action is then remembered as reported).
    let tasks = g.report_tasks.clone();
    let task = tasks.spawn(async move { g.report_async(&c, a, req).await });
    let answer = task
        .await
        .map_err(|e| RequestError::unavailable(format!("report task failed: {e}")))?;
    ok(&answer?)
}

async fn replay(State(g): Gw, Path(a): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    ok(&g.replay(&c, id(&a, "action")?, parse(&body)?)?)
}

async fn status(State(g): Gw, headers: HeaderMap) -> Reply {
    caller(&g, &headers, None)?;
    ok(&g.status())
}

/// An operator's request: checks the token, then parses the body with `parse`, then runs
/// `op` off the async workers (operator changes are synced to disk).
async fn as_operator<B: Send + 'static, T: Serialize + Send + 'static>(
    g: Arc<Gateway>,
    headers: &HeaderMap,
    body: &Bytes,
    parse: fn(&Bytes) -> Result<B, RequestError>,
    op: impl FnOnce(&Gateway, &Caller, B) -> Result<T, RequestError> + Send + 'static,
) -> Reply {
    as_role(Role::Operator, g, headers, body, parse, op).await
}

/// A request of `role`: checks the token, parses the body, runs `op` off the async
/// workers.
async fn as_role<B: Send + 'static, T: Serialize + Send + 'static>(
    role: Role,
    g: Arc<Gateway>,
    headers: &HeaderMap,
    body: &Bytes,
    parse: fn(&Bytes) -> Result<B, RequestError>,
    op: impl FnOnce(&Gateway, &Caller, B) -> Result<T, RequestError> + Send + 'static,
) -> Reply {
    let c = caller(&g, headers, Some(role))?;
    let req = parse(body)?;
    ok(&blocking(move || op(&g, &c, req)).await?)
}

/// Publishing is open to trainers: a version they publish only becomes the canary
/// candidate; promoting it stays an operator's decision.
async fn publish(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_role(
        Role::Trainer,
        g,
        &headers,
        &body,
        parse_required,
        Gateway::publish,
    )
    .await
}

async fn record(State(g): Gw, Path(e): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    ok(&g.record(&c, id(&e, "episode")?, parse_required(&body)?)?)
}

async fn admitted(State(g): Gw, headers: HeaderMap, RawQuery(query): RawQuery) -> Reply {
    caller(&g, &headers, Some(Role::Trainer))?;
    let query: AdmittedQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or(""))
        .map_err(|e| RequestError::invalid(format!("query: {e}")))?;
    ok(&blocking(move || g.admitted(&query)).await?)
}

async fn trained(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_role(
        Role::Trainer,
        g,
        &headers,
        &body,
        parse_required,
        Gateway::trained,
    )
    .await
}

async fn canary(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse_required, |g, _, r| {
        g.set_canary(r)
    })
    .await
}

async fn cooldown(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse_required, |g, _, r| {
        g.set_cooldown(r)
    })
    .await
}

async fn promote(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse, Gateway::promote).await
}

async fn rollback(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse, Gateway::rollback).await
}

async fn rules(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse_required, |g, _, r| g.set_rules(r)).await
}

async fn invalidate(State(g): Gw, headers: HeaderMap, body: Bytes) -> Reply {
    as_operator(g, &headers, &body, parse_required, Gateway::invalidate).await
}

async fn confirm(State(g): Gw, Path(e): Path<String>, headers: HeaderMap) -> Reply {
    caller(&g, &headers, Some(Role::Operator))?;
    let e = id(&e, "episode")?;
    ok(&blocking(move || g.confirm(e)).await?)
}

async fn health() -> &'static str {
    "ok"
}

/// Shared by the routes: the gateway and its metrics.
#[derive(Clone)]
struct Observed {
    gateway: Arc<Gateway>,
    metrics: Arc<Metrics>,
}

async fn metrics(State(o): State<Observed>) -> Response {
    let text = o.metrics.render(&o.gateway);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Times every routed request and counts its status.
async fn track(
    State(m): State<Arc<Metrics>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let start = std::time::Instant::now();
    let response = next.run(req).await;
    m.observe(
        &route,
        response.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    response
}

async fn not_found() -> RequestError {
    RequestError::not_found("no such endpoint (see /openapi.json)")
}

/// The router over a gateway.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let limit = gateway.settings.max_body_bytes;
    let limits = Limits {
        max_body_bytes: limit,
        max_header_bytes: gateway.settings.max_header_bytes,
    };
    let metrics = Arc::new(Metrics::new());
    let observed = Router::new()
        .route("/metrics", get(self::metrics))
        .with_state(Observed {
            gateway: gateway.clone(),
            metrics: metrics.clone(),
        });
    let routes = Router::new()
        .route("/openapi.json", get(openapi))
        .route("/healthz", get(health))
        .route("/v1/status", get(status))
        .route("/v1/episodes", post(start_episode))
        .route("/v1/episodes/{id}", get(get_episode))
        .route("/v1/episodes/{id}/act", post(act))
        .route("/v1/episodes/{id}/record", post(record))
        .route("/v1/episodes/{id}/end", post(end_episode))
        .route("/v1/actions/{id}/recheck", post(recheck))
        .route("/v1/actions/{id}/report", post(report))
        .route("/v1/actions/{id}/replay", post(replay))
        .route("/v1/operator/publish", post(publish))
        .route("/v1/operator/canary", post(canary))
        .route("/v1/operator/cooldown", post(cooldown))
        .route("/v1/operator/promote", post(promote))
        .route("/v1/operator/rollback", post(rollback))
        .route("/v1/operator/rules", post(rules))
        .route("/v1/operator/invalidate", post(invalidate))
        .route("/v1/operator/episodes/{id}/confirm", post(confirm))
        .route("/v1/trainer/admitted", get(admitted))
        .route("/v1/trainer/trained", post(trained))
        .route_layer(axum::middleware::from_fn_with_state(metrics, track))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gateway)
        .merge(observed);
    // Around the whole router, not each route: a layer on the routes would run inside
    // axum's method routing and miss the `Allow` header it adds to a 405.
    Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn_with_state(limits, json_errors))
}
