//! Request limits: oversized heads refused with a JSON 431 before any handler runs, and
//! every error answer of the router's own (405, 413, extractor rejections) rewritten as
//! JSON naming the problem.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;

use super::errors::json_error;

/// Most header lines a request may carry (a JSON 431 past it).
const MAX_HEADER_COUNT: usize = 100;

/// What [`json_errors`] needs to word its answers.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_body_bytes: usize,
    pub(super) max_header_bytes: usize,
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
pub(super) async fn json_errors(
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
