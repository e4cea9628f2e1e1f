//! HTTP errors and request bodies: the one place a refusal becomes a status and a JSON
//! `{error, status}` answer, and where bodies and path ids are parsed with errors that
//! name the problem.

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RequestError;

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
pub(super) fn json_error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &serde_json::json!({ "error": message, "status": status.as_u16() }),
    )
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let text = serde_json::to_string(body).expect("responses serialise");
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

pub(super) type Reply = Result<Response, RequestError>;

pub(super) fn ok<T: Serialize>(body: &T) -> Reply {
    Ok(json_response(StatusCode::OK, body))
}

pub(super) fn parse<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, RequestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    parse_required(body)
}

pub(super) fn parse_required<T: DeserializeOwned>(body: &Bytes) -> Result<T, RequestError> {
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

pub(super) fn id(text: &str, what: &str) -> Result<u64, RequestError> {
    text.parse()
        .map_err(|_| RequestError::invalid(format!("{what} id {text:?} is not a number")))
}
