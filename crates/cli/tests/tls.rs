//! Nothing in the clear across machines: the gateway serves HTTPS from certificate files
//! (reloaded on SIGHUP, a bad reload keeping the certificate in use) with plain HTTP on
//! loopback beside it; NATS connections take TLS and credentials (user and password, or
//! an nkey) against a nats-server that requires them, and are refused, saying why,
//! without them. No token, password or seed reaches a log.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/nats.rs"]
mod nats;
#[path = "support/optional.rs"]
mod optional;
#[path = "support/procs.rs"]
mod procs;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use certs::Authority;
use nats::{gateway, Nats, Strata};
use procs::wait_until;
use strata_gateway::{Client, TokensFile};

fn read_line(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

#[test]
fn the_gateway_serves_https_reloads_its_certificate_on_sighup_and_plain_http_on_loopback() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Authority::new(tmp.path(), "first");
    let (cert, key) = first.server(tmp.path(), "gateway");
    let dir = tmp.path().join("gw");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("serve.log");
    let gw = Strata::start(
        &[
            "serve",
            "--env",
            "cartpole",
            "--dir",
            dir.to_str().unwrap(),
            "--addr",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--plain-addr",
            "127.0.0.1:0",
        ],
        &log,
    );
    wait_until("the gateway to listen", Duration::from_secs(60), || {
        std::fs::read_to_string(dir.join("address")).is_ok_and(|a| a.ends_with('\n'))
    });
    let url = read_line(&dir.join("address"));
    assert!(url.starts_with("https://"), "{url}");
    let tokens: TokensFile =
        serde_json::from_slice(&std::fs::read(dir.join("tokens.json")).unwrap()).unwrap();
    let token = tokens.operator();
    let status = |client: &Client| client.get::<serde_json::Value>("/v1/status");
    status(&Client::with_ca(&url, token, &first.cert).unwrap()).unwrap();
    // A client that does not trust the CA, and plain HTTP to the HTTPS port, get nothing.
    let untrusted = status(&Client::new(&url, token)).unwrap_err();
    assert_eq!(untrusted.status(), None, "{untrusted}");
    let plain_to_tls = status(&Client::new(&url.replace("https://", "http://"), token));
    assert!(plain_to_tls.is_err());
    // Plain HTTP beside it, on loopback.
    let plain = read_line(&dir.join("plain-address"));
    assert!(plain.starts_with("http://127.0.0.1:"), "{plain}");
    status(&Client::new(&plain, token)).unwrap();

    // A certificate from another CA, swapped in and announced with SIGHUP.
    let second = Authority::new(tmp.path(), "second");
    let (cert2, key2) = second.server(tmp.path(), "renewed");
    std::fs::copy(&cert2, &cert).unwrap();
    std::fs::copy(&key2, &key).unwrap();
    gw.signal(libc::SIGHUP);
    wait_until("the renewed certificate", Duration::from_secs(20), || {
        status(&Client::with_ca(&url, token, &second.cert).unwrap()).is_ok()
    });
    assert!(status(&Client::with_ca(&url, token, &first.cert).unwrap()).is_err());
    // A reload that fails keeps the certificate in use, and the gateway serving.
    std::fs::write(&cert, "not a certificate").unwrap();
    gw.signal(libc::SIGHUP);
    wait_until(
        "the failed reload to be logged",
        Duration::from_secs(20),
        || gw.log().contains("not reloaded"),
    );
    status(&Client::with_ca(&url, token, &second.cert).unwrap()).unwrap();

    gw.signal(libc::SIGTERM);
    let mut gw = gw;
    assert!(
        gw.finish(Duration::from_secs(30)).0.success(),
        "{}",
        gw.log()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(token), "a token in the log");
}

#[test]
fn nats_connections_take_tls_and_credentials_and_are_refused_without() {
    let Some(server) = optional::nats_server() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ca = Authority::new(tmp.path(), "nats");
    let (cert, key) = ca.server(tmp.path(), "nats-server");
    let gateway_key = nkeys::KeyPair::new_user();
    let seed = gateway_key.seed().unwrap();
    let password = "pw-7c1f0e-never-logged";
    let nats = Nats::start_with(
        &server,
        tmp.path(),
        &format!(
            "tls {{\n  cert_file: {cert:?}\n  key_file: {key:?}\n}}\nauthorization {{\n  users = [\n    {{user: learner, password: {password:?}}}\n    {{nkey: {:?}}}\n  ]\n}}\n",
            gateway_key.public_key()
        ),
    );
    let url = nats.url();
    let ca_path = ca.cert.to_str().unwrap().to_string();
    let learner_dir = tmp.path().join("learner");
    let learner = |extra: &[&str], password: &str| {
        let mut args = vec![
            "learner",
            "--nats",
            &url,
            "--run",
            "secure",
            "--from-gateways",
            "--env",
            "cartpole",
            "--run-dir",
            learner_dir.to_str().unwrap(),
            "--updates",
            "0",
            "--nats-timeout-secs",
            "3",
            "--nats-user",
            "learner",
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(&args)
            .env("STRATA_NATS_PASSWORD", password)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let said = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    // Without the CA: refused, naming what to pass.
    let out = learner(&[], password);
    assert!(!out.status.success());
    assert!(said(&out).contains("--nats-ca"), "{}", said(&out));
    // The wrong password: refused, naming the credentials, the password never shown.
    let out = learner(&["--nats-ca", &ca_path], "wrong-password-xyz");
    assert!(!out.status.success());
    let text = said(&out);
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(!text.contains("wrong-password-xyz"), "{text}");
    // TLS and the right password: the run starts (its first version published).
    let out = learner(&["--nats-ca", &ca_path], password);
    assert!(out.status.success(), "{}", said(&out));
    assert!(!said(&out).contains(password));

    // A gateway joins the run with its nkey seed, over TLS (it reads the run's config
    // before it listens, so listening means it is in).
    let seed_file = tmp.path().join("gateway.nk");
    std::fs::write(&seed_file, &seed).unwrap();
    let gw_dir = tmp.path().join("gw");
    let (mut gw, _url) = gateway(
        &nats,
        "secure",
        &gw_dir,
        &[
            "--gateway-id",
            "1",
            "--release",
            "auto",
            "--nats-ca",
            &ca_path,
            "--nats-nkey",
            seed_file.to_str().unwrap(),
        ],
    );
    gw.signal(libc::SIGTERM);
    assert!(
        gw.finish(Duration::from_secs(30)).0.success(),
        "{}",
        gw.log()
    );
    assert!(!gw.log().contains(&seed), "the nkey seed in the log");
}
