//! An observation as a request carries it: numbers, or an array's bytes encoded.

use serde::{Deserialize, Deserializer, Serialize};

/// An observation as a request carries it: a JSON array of numbers, or an array's bytes
/// ([`EncodedArray`], compact for pictures).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Observation {
    /// The values, flat (an image channels-last).
    Values(Vec<f32>),
    /// An array's raw bytes, base64-encoded.
    Encoded(EncodedArray),
}

/// An array of bytes sent as such: `[obs_dim]` values (images channels-last), or, for an
/// env whose observation is one image, that image in the env's own shape (`[4, 84, 84]`).
/// Only bytes: every byte string of the right length is a valid observation, so the
/// served OpenAPI spec can state exactly what is accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodedArray {
    /// The element type.
    pub dtype: ArrayDtype,
    /// The array's shape.
    pub shape: Vec<usize>,
    /// Its bytes, row-major, in standard (padded) base64.
    pub base64: String,
}

/// The element type of an [`EncodedArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrayDtype {
    /// Bytes (pixels 0..=255).
    Uint8,
}

/// An array is values, an object is an encoded array: each with its own error messages
/// (an untagged enum would say only that neither matched). Read straight from the
/// request, never through a `serde_json::Value` (a value per number: for a picture sent as
/// numbers, tens of thousands of allocations per request). Each number is read as JSON's
/// `f64` and cast to `f32`, so one beyond `f32`'s range becomes infinite and is refused by
/// the finiteness check naming its index; an encoded array's fields may appear once each.
impl<'de> Deserialize<'de> for Observation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObservationVisitor)
    }
}

struct ObservationVisitor;

impl<'de> serde::de::Visitor<'de> for ObservationVisitor {
    type Value = Observation;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of numbers or an encoded array object")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Observation, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element::<f64>()? {
            values.push(v as f32);
        }
        Ok(Observation::Values(values))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Observation, A::Error> {
        use serde::de::Error;
        EncodedArray::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            .map(Observation::Encoded)
            .map_err(|e| {
                // The parser adds the position to what this returns: said once, not twice.
                let message = e.to_string();
                A::Error::custom(format!(
                    "encoded observation: {}",
                    without_position(&message)
                ))
            })
    }
}

/// A serde_json message without its trailing ` at line L column C`.
fn without_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(at)
            if message[at + " at line ".len()..]
                .split(" column ")
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            &message[..at]
        }
        _ => message,
    }
}
