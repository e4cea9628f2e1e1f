//! A small blocking HTTP client for the gateway's API (used by the fleet, the benchmark
//! and tests); keeps connections alive.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a call can end in.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// Status code.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// No answer (connection refused or reset, timeout).
    #[error("transport: {0}")]
    Transport(String),
}

impl ClientError {
    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            ClientError::Transport(_) => None,
        }
    }

    /// Worth retrying: no answer, rate limited, or the server unavailable.
    pub fn retryable(&self) -> bool {
        matches!(self.status(), None | Some(429) | Some(503))
    }
}

/// A client bound to a base URL and a token.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

impl Client {
    /// A client for `base` (`http://host:port`, or `https://` checked against the
    /// system's roots) using `token`.
    pub fn new(base: &str, token: &str) -> Self {
        Self::build(base, token, None).expect("the system's roots need no file")
    }

    /// A client for `base` using `token` that trusts the CA certificates in `ca` (PEM) for
    /// `https://` (a gateway whose certificate a private CA signed).
    ///
    /// # Errors
    /// [`ClientError::Transport`] when the CA file cannot be read or holds no certificate.
    pub fn with_ca(base: &str, token: &str, ca: &std::path::Path) -> Result<Self, ClientError> {
        Self::build(base, token, Some(ca))
    }

    fn build(base: &str, token: &str, ca: Option<&std::path::Path>) -> Result<Self, ClientError> {
        let mut agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(10))
            .max_idle_connections_per_host(64);
        if base.starts_with("https://") {
            let tls =
                crate::client_tls::RustlsConnector::new(ca).map_err(ClientError::Transport)?;
            agent = agent.tls_connector(std::sync::Arc::new(tls));
        }
        Ok(Client {
            agent: agent.build(),
            base: base.trim_end_matches('/').to_string(),
            auth: format!("Bearer {token}"),
        })
    }

    /// The same server with another token.
    pub fn with_token(&self, token: &str) -> Self {
        Client {
            agent: self.agent.clone(),
            base: self.base.clone(),
            auth: format!("Bearer {token}"),
        }
    }

    /// POSTs `body` as JSON to `path`, decoding the answer.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let text = serde_json::to_string(body).expect("request serialises");
        self.post_raw(path, &text)
    }

    /// POSTs a raw body.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn post_raw<T: DeserializeOwned>(&self, path: &str, body: &str) -> Result<T, ClientError> {
        let r = self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("Authorization", &self.auth)
            .set("Content-Type", "application/json")
            .send_string(body);
        decode(r)
    }

    /// GETs `path`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let r = self
            .agent
            .get(&format!("{}{path}", self.base))
            .set("Authorization", &self.auth)
            .call();
        decode(r)
    }

    /// GETs `path` as text (`/metrics`).
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        match self
            .agent
            .get(&format!("{}{path}", self.base))
            .set("Authorization", &self.auth)
            .call()
        {
            Ok(resp) => resp
                .into_string()
                .map_err(|e| ClientError::Transport(e.to_string())),
            Err(ureq::Error::Status(status, resp)) => Err(ClientError::Status {
                status,
                message: resp.into_string().unwrap_or_default(),
            }),
            Err(e) => Err(ClientError::Transport(e.to_string())),
        }
    }
}

fn decode<T: DeserializeOwned>(r: Result<ureq::Response, ureq::Error>) -> Result<T, ClientError> {
    match r {
        Ok(resp) => {
            let text = resp
                .into_string()
                .map_err(|e| ClientError::Transport(e.to_string()))?;
            serde_json::from_str(&text)
                .map_err(|e| ClientError::Transport(format!("undecodable answer {text:?}: {e}")))
        }
        Err(ureq::Error::Status(status, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(String::from))
                .unwrap_or(text);
            Err(ClientError::Status { status, message })
        }
        Err(e) => Err(ClientError::Transport(e.to_string())),
    }
}
