//! Accepting and serving connections: a cap on open connections, a deadline for each
//! request head (which also ends idle keep-alive connections), bounded head sizes, and a
//! graceful stop. Hyper serves each connection; the accept loop is ours, because the caps
//! and deadlines are not something `axum::serve` offers.
//!
//! Every answer a client can get is JSON `{error, status}`, except one: a request head
//! larger than [`TRANSPORT_HEAD_BYTES`] is cut by hyper itself with a bare 431 (heads up
//! to that size reach the router, which answers JSON; see `server::limits`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
pub(crate) use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The most a request head may take in hyper's read buffer. Heads over the gateway's own
/// `max_header_bytes` but under this get a JSON 431 from the router; heads over this get
/// hyper's bare 431. It bounds a connection's buffer, so memory stays bounded by
/// `max_connections` times this.
pub(crate) const TRANSPORT_HEAD_BYTES: usize = (1 << 20) + (64 << 10);

/// Header lines hyper parses before answering a bare 431; the router's own limit
/// (`MAX_HEADER_COUNT`) is lower, so clients see its JSON answer first.
const TRANSPORT_HEADER_COUNT: usize = 1000;

/// Refusals (over the cap) answered at once; past this many a connection is just closed.
const REFUSALS_IN_FLIGHT: usize = 64;

/// How long a refused client gets to read the 503 before the socket closes.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long open connections get to finish their requests when the server stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The limits the accept loop enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// A connection that has not sent a whole request head this long after it opened or
    /// after its last answer is closed (idle keep-alive and half-sent heads alike).
    pub header_read_timeout: Duration,
}

/// Serves `app` on `listener` (over TLS when `tls` is given: each connection's handshake
/// must finish within the head deadline) until `stop` turns true (or its sender is
/// dropped), then lets open connections finish for up to [`DRAIN_TIMEOUT`]. `permits`
/// caps the connections open at once (shared by every listener of one gateway).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    permits: Arc<Semaphore>,
    tls: Option<Arc<crate::tls::TlsSource>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(TRANSPORT_HEAD_BYTES)
        .max_headers(TRANSPORT_HEADER_COUNT);
    let service = TowerToHyperService::new(app);
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    let (drain_tx, drain_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors or memory: wait for connections to close
                        // rather than spin on the same error.
                        tracing::warn!(component = "gateway", error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (http, service, drain) = (http.clone(), service.clone(), drain_rx.clone());
                        let tls = tls.as_ref().map(|t| t.acceptor());
                        let deadline = limits.header_read_timeout;
                        connections.spawn(async move {
                            match tls {
                                None => serve_one(&http, stream, service, drain, peer).await,
                                Some(acceptor) => {
                                    match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                                        Ok(Ok(stream)) => serve_one(&http, stream, service, drain, peer).await,
                                        Ok(Err(e)) => tracing::debug!(component = "gateway", %peer, error = %e, "TLS handshake failed"),
                                        Err(_) => tracing::debug!(component = "gateway", %peer, "TLS handshake timed out"),
                                    }
                                }
                            }
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        // Over TLS the answer would need a handshake first: just close.
                        if tls.is_some() {
                            continue;
                        }
                        if let Ok(slot) = refusals.clone().try_acquire_owned() {
                            tokio::spawn(async move {
                                refuse(stream, limits.max_connections).await;
                                drop(slot);
                            });
                        }
                    }
                }
            }
        }
    }
    drop(listener);
    let _ = drain_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            component = "gateway",
            open = connections.len(),
            "connections still open after {DRAIN_TIMEOUT:?}; closing them"
        );
        connections.shutdown().await;
    }
}

/// Returns once `stop` is true or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Serves one connection (plain or TLS) until it ends, shutting it down gracefully when
/// the server drains.
async fn serve_one<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    http: &http1::Builder,
    io: I,
    service: TowerToHyperService<Router>,
    mut drain: watch::Receiver<bool>,
    peer: SocketAddr,
) {
    let conn = http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => log_end(peer, result),
        _ = drain.changed() => {
            conn.as_mut().graceful_shutdown();
            log_end(peer, conn.await);
        }
    }
}

fn log_end(peer: SocketAddr, result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        // Timeouts, resets and malformed heads are the client's doing: not worth a warning.
        tracing::debug!(component = "gateway", %peer, error = %e, "connection ended");
    }
}

/// The answer to a connection over the cap, written without reading the request.
pub(crate) fn refusal(max_connections: usize) -> Vec<u8> {
    let body = serde_json::json!({
        "error": format!(
            "too many connections: this gateway serves at most {max_connections} at once; retry shortly"
        ),
        "status": 503,
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers 503 and closes, reading what the client sent for a moment first: closing a
/// socket with unread data resets it, and a reset can destroy the answer in flight.
async fn refuse(mut stream: TcpStream, max_connections: usize) {
    let answer = refusal(max_connections);
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        if stream.write_all(&answer).await.is_ok() && stream.shutdown().await.is_ok() {
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    })
    .await;
}

/// Raises the soft limit on open files to the hard limit and returns the connection cap
/// that fits under it, keeping `reserve` descriptors for the ledger, the journal and the
/// runtime (running out of those would fail durable writes, not just new connections).
pub(crate) fn fit_to_descriptors(wanted: usize, reserve: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(current), hard) = (limit.current, limit.maximum) {
        let target = hard.unwrap_or(u64::MAX).min(1 << 20);
        if current < target {
            limit.current = Some(target);
            if setrlimit(Resource::Nofile, limit).is_err() {
                limit.current = Some(current);
            }
        }
    }
    let Some(available) = limit.current else {
        return wanted;
    };
    let fits = usize::try_from(available)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserve)
        .max(1);
    if fits < wanted {
        tracing::warn!(
            component = "gateway",
            wanted,
            open_files_limit = available,
            cap = fits,
            "the open-files limit is too low for max_connections; serving fewer"
        );
    }
    wanted.min(fits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_json_answer() {
        let text = String::from_utf8(refusal(7)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["status"], 503);
        assert!(json["error"].as_str().unwrap().contains("at most 7"));
    }

    #[test]
    fn the_cap_keeps_descriptors_in_reserve() {
        let cap = fit_to_descriptors(usize::MAX, 64);
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(current) = limit.current.filter(|&c| c > 64) {
            assert_eq!(cap as u64, current - 64);
        }
        assert_eq!(fit_to_descriptors(3, 64), 3);
    }
}
