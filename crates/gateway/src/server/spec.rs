//! The OpenAPI document: the spec as written (`openapi.json`) and as this gateway serves
//! it, with the env's sizes, action types and encoded shapes filled in.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::routes::Gw;
use crate::gateway::Gateway;

/// The OpenAPI description of the API.
pub const OPENAPI: &str = include_str!("../openapi.json");

pub(super) async fn openapi(State(g): Gw) -> Response {
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
pub(super) fn served_spec(gateway: &Gateway) -> String {
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
