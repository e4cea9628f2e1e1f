//! The HTTP/JSON server (axum on tokio): routes, authentication, head and body limits and
//! JSON errors; the operations live in [`Gateway`], the connection handling in
//! `connections`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::AdmittedQuery;
use crate::auth::{Caller, Role};
use crate::error::{GatewayError, RequestError};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::settings::GatewaySettings;

/// The OpenAPI description of the API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// The one place a refusal becomes an HTTP status.
fn status_of(e: &RequestError) -> StatusCode {
    match e {
        RequestError::Invalid(_) => StatusCode::BAD_REQUEST,
        RequestError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        RequestError::Forbidden(_) => StatusCode::FORBIDDEN,
        RequestError::NotFound(_) => StatusCode::NOT_FOUND,
        RequestError::Conflict(_) => StatusCode::CONFLICT,
        RequestError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        RequestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        json_error(status_of(&self), self.message())
    }
}

/// An error answer: JSON `{error, status}`.
fn json_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &serde_json::json!({ "error": message, "status": status.as_u16() }),
    )
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let text = serde_json::to_string(body).expect("responses serialise");
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

type Reply = Result<Response, RequestError>;

fn ok<T: Serialize>(body: &T) -> Reply {
    Ok(json_response(StatusCode::OK, body))
}

fn parse<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, RequestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    parse_required(body)
}

fn parse_required<T: DeserializeOwned>(body: &Bytes) -> Result<T, RequestError> {
    // Every body is an object: serde would also read a struct from an array (`[]`).
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(RequestError::invalid(
            "invalid JSON body: expected an object, got an array",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let non_finite = non_finite_literal(body, &e)
            .map(|word| format!(" ({word} is a non-finite number, which JSON cannot carry and the gateway does not accept)"))
            .unwrap_or_default();
        RequestError::invalid(format!("invalid JSON body: {e}{non_finite}"))
    })
}

/// The `NaN` / `Infinity` literal a JSON parse error stopped at, if any: some encoders
/// write them for non-finite floats, and "expected value" alone would not say why.
fn non_finite_literal(body: &[u8], e: &serde_json::Error) -> Option<&'static str> {
    if !e.is_syntax() {
        return None;
    }
    let line_start: usize = body
        .split(|&b| b == b'\n')
        .take(e.line().saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum();
    // The column is where the parser gave up: at the literal or just past its first byte.
    let at = (line_start + e.column()).saturating_sub(2).min(body.len());
    let rest = &body[at..];
    ["NaN", "-Infinity", "Infinity"].into_iter().find(|word| {
        (0..=1).any(|skip| {
            rest.get(skip..)
                .is_some_and(|r| r.starts_with(word.as_bytes()))
        })
    })
}

fn id(text: &str, what: &str) -> Result<u64, RequestError> {
    text.parse()
        .map_err(|_| RequestError::invalid(format!("{what} id {text:?} is not a number")))
}

type Gw = State<Arc<Gateway>>;

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
    ok(&blocking(move || g.recheck(&c, a, req)).await?)
}

async fn report(State(g): Gw, Path(a): Path<String>, headers: HeaderMap, body: Bytes) -> Reply {
    let c = caller(&g, &headers, Some(Role::Agent))?;
    let (a, req) = (id(&a, "action")?, parse_required(&body)?);
    ok(&blocking(move || g.report(&c, a, req)).await?)
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

async fn openapi(State(g): Gw) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        served_spec(&g),
    )
        .into_response()
}

/// The OpenAPI spec as this gateway accepts requests: each array marked
/// `x-strata-length: obs_dim` gets exactly the env's observation size as its length, each
/// marked `x-strata-length: summary_dim` the size of an observation summary (a value per
/// observation value, one per image channel), each string marked
/// `x-strata-enum: action_types` the configured action types, and the schema marked
/// `x-strata-encoded` one exact variant per shape an encoded observation may have (its
/// base64 of exactly that many bytes).
pub fn served_spec(gateway: &Gateway) -> String {
    let fill_in = FillIn {
        obs_dim: gateway.obs_dim(),
        summary_dim: gateway.summary_dim(),
        action_types: gateway.action_types(),
        encoded_shapes: gateway.encoded_shapes(),
    };
    let mut spec: serde_json::Value =
        serde_json::from_str(OPENAPI).expect("the bundled spec is JSON");
    fill_in.fill(&mut spec);
    spec.to_string()
}

/// What [`served_spec`] writes in place of the markers.
struct FillIn {
    obs_dim: usize,
    summary_dim: usize,
    action_types: Vec<String>,
    encoded_shapes: Vec<Vec<usize>>,
}

impl FillIn {
    fn fill(&self, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if map.remove("x-strata-encoded").is_some() {
                    let description = map.remove("description");
                    map.clear();
                    map.insert("oneOf".into(), self.encoded_variants());
                    if let Some(d) = description {
                        map.insert("description".into(), d);
                    }
                    return;
                }
                if let Some(marker) = map.remove("x-strata-length") {
                    let n = match marker.as_str() {
                        Some("summary_dim") => self.summary_dim,
                        _ => self.obs_dim,
                    };
                    map.insert("minItems".into(), n.into());
                    map.insert("maxItems".into(), n.into());
                }
                if map.remove("x-strata-enum").is_some() {
                    map.insert("enum".into(), self.action_types.clone().into());
                }
                map.values_mut().for_each(|v| self.fill(v));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.fill(v)),
            _ => {}
        }
    }

    /// One schema per accepted shape: that shape, and base64 of exactly its byte count.
    fn encoded_variants(&self) -> serde_json::Value {
        let variants: Vec<serde_json::Value> = self
            .encoded_shapes
            .iter()
            .map(|shape| {
                let bytes: usize = shape.iter().product();
                let (pattern, len) = base64_of(bytes);
                serde_json::json!({
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["dtype", "shape", "base64"],
                    "properties": {
                        "dtype": {"type": "string", "enum": ["uint8"]},
                        "shape": {
                            "type": "array",
                            "items": {"type": "integer", "minimum": 0},
                            "enum": [shape],
                        },
                        "base64": {
                            "type": "string",
                            "pattern": pattern,
                            "minLength": len,
                            "maxLength": len,
                        },
                    },
                })
            })
            .collect();
        variants.into()
    }
}

/// The pattern and length of standard base64 for `n` bytes: whole groups, then the
/// canonical last group (its unused bits zero, as a strict decoder requires).
fn base64_of(n: usize) -> (String, usize) {
    const CHAR: &str = "[A-Za-z0-9+/]";
    let whole = format!("^{CHAR}{{{}}}", 4 * (n / 3));
    let pattern = match n % 3 {
        0 => format!("{whole}$"),
        1 => format!("{whole}{CHAR}[AQgw]==$"),
        _ => format!("{whole}{CHAR}{{2}}[AEIMQUYcgkosw048]=$"),
    };
    (pattern, n.div_ceil(3) * 4)
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

/// Most header lines a request may carry (a JSON 431 past it).
const MAX_HEADER_COUNT: usize = 100;

/// What [`json_errors`] needs to word its answers.
#[derive(Clone, Copy)]
struct Limits {
    max_body_bytes: usize,
    max_header_bytes: usize,
}

/// The size of a request's head as sent: request line and header lines.
fn head_bytes(req: &axum::extract::Request) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let line = req.method().as_str().len() + target + 11;
    let headers: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    line + headers + 2
}

/// Every error answer is JSON `{error, status}` naming the problem: the router's own
/// (405, the body limit's 413, extractor rejections) are rewritten here, and oversized
/// heads are refused here with 431, before any handler runs.
async fn json_errors(
    State(limits): State<Limits>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let size = head_bytes(&req);
    let lines = req.headers().len();
    if size > limits.max_header_bytes || lines > MAX_HEADER_COUNT {
        return json_error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!(
                "request head is {size} bytes in {lines} header lines; the limit is {} bytes and {MAX_HEADER_COUNT} lines",
                limits.max_header_bytes
            ),
        );
    }
    // Cheap clones (shared bytes), kept only to word a 405.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "request body is larger than the limit of {} bytes",
            limits.max_body_bytes
        ),
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "method {method} is not allowed on {}{}",
            uri.path(),
            allow
                .as_ref()
                .and_then(|a| a.to_str().ok())
                .map(|a| format!(" (allowed: {a})"))
                .unwrap_or_default()
        ),
        _ if !text.is_empty() => text,
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let mut answer = json_error(status, &message);
    if let Some(allow) = allow {
        answer.headers_mut().insert(header::ALLOW, allow);
    }
    answer
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

/// A running gateway: HTTP server, learner and idle-episode reaper.
pub struct Server {
    addr: SocketAddr,
    gateway: Arc<Gateway>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    http: Option<JoinHandle<()>>,
    learner: Option<JoinHandle<()>>,
}

/// How often a serving gateway applies its version retention rule (its ledger compacts its
/// sample log on a thread of its own, every 30 s).
const RETENTION_EVERY: Duration = Duration::from_secs(30);

impl Server {
    /// Opens the gateway and starts serving; returns once the socket is bound (its address
    /// is also written to `<dir>/address`).
    ///
    /// # Errors
    /// Invalid settings, unreadable state, or the address cannot be bound.
    pub fn start(settings: GatewaySettings) -> Result<Server, GatewayError> {
        let threads = settings.http_threads;
        let addr = settings.addr;
        let dir = settings.dir.clone();
        let serve_first = settings.serve_first.clone();
        let gateway = Arc::new(Gateway::open(settings)?);
        // Before any request and before the learner picks its starting version.
        if let Some((params, author)) = serve_first {
            let (version, published) = gateway
                .serve_params_now(params, &author)
                .map_err(|e| GatewayError::Config(format!("serving the given policy: {e}")))?;
            gateway
                .counters
                .served_first_published
                .store(published, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(
                component = "gateway",
                version,
                published,
                "serving the given policy as stable"
            );
        }
        let learner = if gateway.learns() {
            let (tx, rx) = crossbeam_channel::bounded(gateway.settings.learner_queue);
            gateway.attach_learner(tx);
            Some(
                crate::learner::spawn(gateway.clone(), rx)
                    .map_err(|e| GatewayError::io("learner thread", e))?,
            )
        } else {
            None
        };
        // Descriptors kept for the ledger's files, the journal, the runtime and the learner.
        const RESERVED_DESCRIPTORS: usize = 128;
        let limits = crate::connections::ConnectionLimits {
            max_connections: crate::connections::fit_to_descriptors(
                gateway.settings.max_connections,
                RESERVED_DESCRIPTORS,
            ),
            header_read_timeout: gateway.settings.header_read_timeout,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .max_blocking_threads(512)
            .thread_name("strata-gateway-http")
            .enable_all()
            .build()
            .map_err(|e| GatewayError::io("tokio runtime", e))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|e| GatewayError::io(addr.to_string(), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| GatewayError::io(addr.to_string(), e))?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(gateway.clone());
        let reaper_gateway = gateway.clone();
        let sweeper_gateway = gateway.clone();
        let http = std::thread::Builder::new()
            .name("strata-gateway".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // Ends with the runtime, when serving stops.
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_secs(1));
                        loop {
                            tick.tick().await;
                            let g = reaper_gateway.clone();
                            let _ = tokio::task::spawn_blocking(move || {
                                g.reap_idle();
                                if let Err(e) = g.compact_journal() {
                                    tracing::error!(component = "gateway", error = %e, "journal compaction failed");
                                }
                            })
                            .await;
                        }
                    });
                    // The version retention rule, applied as versions come.
                    let sweeping = sweeper_gateway;
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(RETENTION_EVERY);
                        tick.tick().await; // the first tick is at once
                        loop {
                            tick.tick().await;
                            let g = sweeping.clone();
                            let _ = tokio::task::spawn_blocking(move || {
                                match g.sweep_versions() {
                                    Ok(0) => {}
                                    Ok(removed) => tracing::debug!(component = "gateway", removed, "policy versions let go"),
                                    Err(e) => tracing::error!(component = "gateway", error = %e, "policy version sweep failed; retried later"),
                                }
                            })
                            .await;
                        }
                    });
                    crate::connections::serve(listener, app, limits, rx).await;
                })
            })
            .map_err(|e| GatewayError::io("gateway thread", e))?;
        let address_file = dir.join("address");
        std::fs::write(&address_file, format!("http://{bound}\n"))
            .map_err(|e| GatewayError::io(&address_file, e))?;
        tracing::info!(component = "gateway", address = %bound, "serving");
        Ok(Server {
            addr: bound,
            gateway,
            shutdown: Some(tx),
            http: Some(http),
            learner,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Whether the HTTP server is still running.
    pub fn is_running(&self) -> bool {
        self.http.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stops serving, stops the learner and flushes the ledger.
    ///
    /// # Errors
    /// The server's or the ledger's failure.
    pub fn stop(mut self) -> Result<(), GatewayError> {
        self.shutdown_inner()
    }

    fn shutdown_inner(&mut self) -> Result<(), GatewayError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let mut result = Ok(());
        if let Some(h) = self.http.take() {
            if h.join().is_err() {
                result = Err(GatewayError::Config("http server panicked".into()));
            }
        }
        // No request can reach the learner now: closing its queue stops it.
        self.gateway.detach_learner();
        if let Some(h) = self.learner.take() {
            if h.join().is_err() {
                result = Err(GatewayError::Config("the learner thread panicked".into()));
            }
        }
        self.gateway.ledger.flush()?;
        if result.is_ok() {
            self.gateway
                .journal_clean_stop()
                .map_err(|e| GatewayError::Config(format!("journalling the stop: {e}")))?;
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.http.is_some() {
            if let Err(e) = self.shutdown_inner() {
                tracing::error!(component = "gateway", error = %e, "stopping the gateway");
            }
        }
    }
}
