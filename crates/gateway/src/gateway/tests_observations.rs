//! Observations as requests carry them: numbers or encoded bytes, a picture in the env's
//! own shape, and the refusals that name what was wrong.

use std::path::Path;

use serde_json::json;

use super::tests::{agent, open, request};
use super::*;
use crate::settings::GatewaySettings;

/// An act's request with `observation` as given.
fn act_with(
    g: &Gateway,
    caller: &Caller,
    episode: u64,
    observation: serde_json::Value,
) -> Result<ActResponse, RequestError> {
    g.act(
        caller,
        episode,
        request(json!({"observation": observation, "env_seq": 1, "idempotency_key": "k"})),
    )
}

fn encoded(dtype: &str, shape: &[usize], bytes: &[u8]) -> serde_json::Value {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"dtype": dtype, "shape": shape, "base64": text})
}

#[test]
fn encoded_observations_act_as_their_values_and_bad_ones_are_named() {
    // Two gateways of the same seed, the same key: the same observation, sent as numbers
    // or as bytes, gets the same action.
    let mut actions = Vec::new();
    for observation in [
        json!([0.0, 1.0, 0.0, 2.0]),
        encoded("uint8", &[4], &[0, 1, 0, 2]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let g = open(dir.path());
        let ana = agent("agent-0");
        let e = g.start_episode(&ana, request(json!({}))).unwrap();
        actions.push(
            act_with(&g, &ana, e.episode_id, observation)
                .unwrap()
                .action,
        );
    }
    assert_eq!(actions[0], actions[1]);
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    assert_eq!(g.encoded_shapes(), [vec![4]], "cartpole has no image");
    let ana = agent("agent-0");
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let invalid =
        |observation: serde_json::Value| match act_with(&g, &ana, e.episode_id, observation) {
            Err(RequestError::Invalid(message)) => message,
            other => panic!("{other:?}"),
        };
    let bad = json!({"dtype": "uint8", "shape": [4], "base64": "***"});
    assert!(invalid(bad).contains("observation.base64"));
    let short = invalid(encoded("uint8", &[4], &[1, 2, 3]));
    assert!(
        short.contains("3 bytes for shape [4] (expected 4)"),
        "{short}"
    );
    let wrong = invalid(encoded("uint8", &[2, 2], &[1, 2, 3, 4]));
    assert!(
        wrong.contains("shape [2, 2]; the policy expects [4]"),
        "{wrong}"
    );
    // Only bytes are taken encoded.
    let float = serde_json::from_value::<ActRequest>(json!({
        "observation": {"dtype": "float32", "shape": [1], "base64": "AAAAAA=="},
        "env_seq": 1, "idempotency_key": "k"
    }));
    let message = float.unwrap_err().to_string();
    assert!(
        message.contains("encoded observation: unknown variant `float32`"),
        "{message}"
    );
    // Read from the request's bytes as the server does: numbers, an encoded object, and
    // anything else refused naming both forms.
    let parse = |text: &str| {
        serde_json::from_str::<ActRequest>(&format!(
            r#"{{"observation": {text}, "env_seq": 1, "idempotency_key": "k"}}"#
        ))
    };
    assert_eq!(
        parse("[0.5, -1, 2e3]").unwrap().observation,
        Observation::Values(vec![0.5, -1.0, 2000.0])
    );
    let bytes = parse(r#"{"dtype": "uint8", "shape": [1], "base64": "AA=="}"#).unwrap();
    assert!(matches!(bytes.observation, Observation::Encoded(_)));
    let text = parse(r#""0.5""#).unwrap_err().to_string();
    assert!(
        text.contains("expected an array of numbers or an encoded array object"),
        "{text}"
    );
    let mixed = parse(r#"[0.5, "x"]"#).unwrap_err().to_string();
    assert!(mixed.contains("invalid type: string"), "{mixed}");
    let extra = parse(r#"{"dtype": "uint8", "shape": [1], "base64": "AA==", "x": 1}"#)
        .unwrap_err()
        .to_string();
    assert!(
        extra.contains("encoded observation: unknown field `x`"),
        "{extra}"
    );
    // The position is said once, by the parser.
    assert_eq!(extra.matches(" at line ").count(), 1, "{extra}");
    let twice = parse(r#"{"dtype": "uint8", "dtype": "uint8", "shape": [1], "base64": "AA=="}"#)
        .unwrap_err()
        .to_string();
    assert!(twice.contains("duplicate field `dtype`"), "{twice}");
    // Beyond f32's range: infinite, then refused by the check that names the element.
    let huge = parse("[1e39, 0.5]").unwrap().observation;
    assert_eq!(huge, Observation::Values(vec![f32::INFINITY, 0.5]));
    let refused = invalid(json!([1e39, 0.0, 0.0, 0.0]));
    assert!(
        refused.contains("observation[0] is not a finite number"),
        "{refused}"
    );
}

#[test]
fn pictures_are_taken_in_the_envs_own_shape() {
    // The pixel test env, channels-first with 2 channels (needs Python with gymnasium).
    let open_pixels = |dir: &Path| {
        let mut settings =
            GatewaySettings::new("gym:strata_test_envs:make_pixel_env", dir).unwrap();
        settings.run.runtime.python_path =
            vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../env/tests/python")];
        let kwargs = &mut settings.run.env.gym.kwargs;
        kwargs.insert("order".into(), toml::Value::String("chw".into()));
        kwargs.insert("channels".into(), toml::Value::Integer(2));
        settings.run.ledger.flush_interval_secs = 0.05;
        Gateway::open(settings)
    };
    let dir = tempfile::tempdir().unwrap();
    let g = match open_pixels(dir.path()) {
        Ok(g) => g,
        Err(e) if std::env::var_os("STRATA_REQUIRE_GYM").is_none() => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!((g.obs_dim(), g.summary_dim()), (288, 2));
    // A bright square in channel 1 only, as the env gives it (2, 12, 12).
    let mut chw = vec![0u8; 288];
    for y in 3..6 {
        for x in 7..10 {
            chw[144 + y * 12 + x] = 255;
        }
    }
    let mut hwc = vec![0.0f32; 288];
    for y in 3..6 {
        for x in 7..10 {
            hwc[(y * 12 + x) * 2 + 1] = 255.0;
        }
    }
    let ana = agent("agent-0");
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let first = act_with(&g, &ana, e.episode_id, encoded("uint8", &[2, 12, 12], &chw)).unwrap();
    drop(g);
    let dir = tempfile::tempdir().unwrap();
    let g = open_pixels(dir.path()).unwrap();
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let again = act_with(&g, &ana, e.episode_id, json!(hwc)).unwrap();
    assert_eq!(first.action, again.action);
    // Reported as bytes too; the sample's summary is per channel.
    let after = encoded("uint8", &[2, 12, 12], &chw);
    let r = g.report(
        &ana,
        again.action_id,
        request(json!({"observation_after": after, "reward": 1.0, "terminated": true})),
    );
    assert!(r.is_ok(), "{r:?}");
    let wrong = act_with(&g, &ana, e.episode_id, encoded("uint8", &[12, 12, 2], &chw));
    assert!(
        matches!(&wrong, Err(RequestError::Invalid(m)) if m.contains("the env's image shape [2, 12, 12]")),
        "{wrong:?}"
    );
}
