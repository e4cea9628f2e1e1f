//! The gateway's HTTP edges as an outside client meets them, over raw sockets: every error
//! is JSON, heads and bodies have limits, idle and half-sent connections are closed, the
//! connection cap answers 503, and operators cannot invalidate what was never issued.

#[path = "support/harness.rs"]
mod harness;
use harness::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// An answer read off a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// The body as the documented JSON error; panics naming the answer otherwise.
    fn json_error(&self) -> String {
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "not JSON: {self:?}"
        );
        let v: Value = serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"));
        assert_eq!(v["status"], self.status, "{self:?}");
        v["error"].as_str().expect("an error message").to_string()
    }
}

/// Reads one answer: the head, then `content-length` bytes of body (or to the end).
fn read_answer(stream: &mut TcpStream) -> Answer {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).expect("an answer");
        assert!(
            n > 0,
            "closed without an answer: {:?}",
            String::from_utf8_lossy(&bytes)
        );
        bytes.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let status = head[9..12].parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "body cut short");
        bytes.extend_from_slice(&chunk[..n]);
    }
    Answer {
        status,
        head,
        body: String::from_utf8_lossy(&bytes[head_end..head_end + length]).to_string(),
    }
}

/// Sends `request` on a fresh connection (from another thread, so a server that answers
/// before reading it all cannot block the test) and reads the answer.
fn send(addr: SocketAddr, request: Vec<u8>) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
    });
    let answer = read_answer(&mut stream);
    drop(stream);
    sending.join().unwrap();
    answer
}

fn request(method: &str, path: &str, token: &str, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether the server closes `stream` within `within` (reading nothing but the end).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // A 408 or similar before closing is fine; keep reading to the end.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn every_error_answer_is_json_naming_the_problem() {
    let h = Harness::start(|s| s.max_body_bytes = 4096);
    let addr = h.server().addr();
    let tokens = h.server().gateway().tokens().agent_tokens();
    let token = tokens[0].1.clone();
    let e = start(&h.agent(0));
    let act_path = format!("/v1/episodes/{}/act", e.episode_id);

    // A 1 MB body: 413 naming the limit.
    let big = format!(r#"{{"observation":[{}]}}"#, vec!["0.0"; 250_000].join(","));
    let a = send(addr, request("POST", &act_path, &token, "", &big));
    assert_eq!(a.status, 413);
    assert!(a.json_error().contains("limit of 4096 bytes"), "{a:?}");

    // Wrong methods on known paths: 405 naming the method and what is allowed.
    let a = send(addr, request("GET", &act_path, &token, "", ""));
    assert_eq!(a.status, 405, "{a:?}");
    let message = a.json_error();
    assert!(
        message.contains("GET") && message.contains("POST"),
        "{message} {a:?}"
    );
    let a = send(
        addr,
        request(
            "DELETE",
            &format!("/v1/episodes/{}", e.episode_id),
            &token,
            "",
            "",
        ),
    );
    assert_eq!(a.status, 405, "{a:?}");
    assert!(a.json_error().contains("DELETE"), "{a:?}");

    // A 1 MiB header and too many header lines: 431 naming the limits.
    let huge = format!("X-Padding: {}\r\n", "a".repeat(1 << 20));
    let a = send(addr, request("GET", "/v1/status", &token, &huge, ""));
    assert_eq!(a.status, 431, "{}", a.head);
    assert!(a.json_error().contains("the limit is 32768 bytes"), "{a:?}");
    let many: String = (0..150).map(|i| format!("X-Line-{i}: v\r\n")).collect();
    let a = send(addr, request("GET", "/v1/status", &token, &many, ""));
    assert_eq!(a.status, 431, "{}", a.head);
    assert!(a.json_error().contains("100 lines"), "{a:?}");

    // Non-finite literals some encoders write: 400 saying so.
    for (literal, word) in [
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
    ] {
        let body = format!(
            r#"{{"observation":[0.0,{literal},0.0,0.0],"env_seq":0,"idempotency_key":"nf"}}"#
        );
        let a = send(addr, request("POST", &act_path, &token, "", &body));
        assert_eq!(a.status, 400, "{a:?}");
        let message = a.json_error();
        assert!(
            message.contains("non-finite") && message.contains(word),
            "{message}"
        );
    }

    // Unknown paths, missing tokens and bad ids stay JSON too.
    for (method, path, auth, code) in [
        ("GET", "/nowhere", token.as_str(), 404),
        ("POST", "/v1/episodes", "wrong", 401),
        ("GET", "/v1/episodes/x", token.as_str(), 400),
    ] {
        let a = send(addr, request(method, path, auth, "", ""));
        assert_eq!(a.status, code, "{a:?}");
        a.json_error();
    }

    // And the server still serves.
    let status: Value = h.agent(0).get("/v1/status").unwrap();
    assert!(status["stable"].is_u64(), "{status}");
}

#[test]
fn idle_and_half_sent_connections_are_closed_and_the_cap_answers_503() {
    let h = Harness::start(|s| {
        s.max_connections = 4;
        // Long enough that a loaded machine still opens all five before any is closed.
        s.header_read_timeout = Duration::from_secs(3);
    });
    let addr = h.server().addr();
    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"POST /v1/episodes HTTP/1.1\r\nHost: gateway\r\nAuthor")
        .unwrap();
    // Give the server a moment to take all four in before the fifth arrives.
    std::thread::sleep(Duration::from_millis(200));

    // The fifth is over the cap: 503, JSON, and closed.
    let mut fifth = TcpStream::connect(addr).unwrap();
    let a = read_answer(&mut fifth);
    assert_eq!(a.status, 503, "{a:?}");
    assert!(a.json_error().contains("at most 4"), "{a:?}");
    assert!(closed_within(&mut fifth, Duration::from_secs(10)));

    // Idle and half-sent connections are closed by the head deadline, not before it.
    for stream in idle.iter_mut().chain(std::iter::once(&mut half)) {
        assert!(
            closed_within(stream, Duration::from_secs(20)),
            "a connection outlived the head deadline"
        );
    }
    assert!(opened.elapsed() >= Duration::from_millis(2900));

    // The cap's places are free again: a keep-alive client is served, then its idle
    // connection is closed in turn.
    let token = h.server().gateway().tokens().agent_tokens()[0].1.clone();
    let mut client = TcpStream::connect(addr).unwrap();
    client
        .write_all(&request("GET", "/v1/status", &token, "", ""))
        .unwrap();
    let a = read_answer(&mut client);
    assert_eq!(a.status, 200, "{a:?}");
    assert!(closed_within(&mut client, Duration::from_secs(20)));
}

#[test]
fn invalidating_what_was_never_issued_is_404() {
    let h = Harness::start(|_| {});
    let (agent, op) = (h.agent(0), h.operator());
    let e = start(&agent);
    let a = act(&agent, e.episode_id, "k1").unwrap();
    let stored = report(&agent, a.action_id).unwrap();
    let sample = stored.sample_id.unwrap();
    let invalidate = |body: Value| op.post::<_, Value>("/v1/operator/invalidate", &body);
    for (body, needle) in [
        (
            json!({"trajectory": 999, "text": "no such"}),
            "no trajectory 999",
        ),
        (
            json!({"trajectory": 0, "text": "no such"}),
            "no trajectory 0",
        ),
        (
            json!({"first_sample": sample + 10, "text": "no such"}),
            "no sample",
        ),
        (
            json!({"first_sample": sample, "last_sample": sample + 10, "text": "no such"}),
            "no sample",
        ),
    ] {
        let (code, message) = status_of(invalidate(body.clone()));
        assert_eq!(code, 404, "{body}: {message}");
        assert!(message.contains(needle), "{body}: {message}");
    }
    // What was issued can be invalidated, and only that reached the ledger.
    invalidate(json!({"trajectory": e.trajectory_id, "text": "operator saw a fault"})).unwrap();
    invalidate(json!({"first_sample": sample, "text": "bad sensor"})).unwrap();
    let invalidations = h.ledger().invalidations;
    assert_eq!(invalidations.len(), 2, "{invalidations:?}");
}
