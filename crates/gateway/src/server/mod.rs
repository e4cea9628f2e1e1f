//! The HTTP/JSON server (axum on tokio): a running gateway ([`Server`]) and what it
//! serves. The operations live in [`Gateway`], the connection handling in `connections`;
//! here: the routes (`routes`), HTTP errors and bodies (`errors`), request limits
//! (`limits`), the OpenAPI document (`spec`) and the loops beside the requests
//! (`maintenance`).

mod errors;
mod limits;
mod maintenance;
mod routes;
mod spec;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::settings::GatewaySettings;
use std::time::Duration;

/// How long a stopping server waits for report tasks still making their samples durable.
const REPORT_DRAIN: Duration = Duration::from_secs(10);

pub use routes::router;
pub use spec::OPENAPI;

/// A running gateway: HTTP server, learner and idle-episode reaper.
pub struct Server {
    addr: SocketAddr,
    gateway: Arc<Gateway>,
    /// The certificate HTTPS serves, when it does.
    tls: Option<Arc<crate::tls::TlsSource>>,
    /// The plain-HTTP loopback listener beside HTTPS, when there is one.
    plain_addr: Option<SocketAddr>,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    http: Option<JoinHandle<()>>,
    learner: Option<JoinHandle<()>>,
}

impl Server {
    /// Opens the gateway and starts serving; returns once the socket is bound (its address
    /// is also written to `<dir>/address`).
    ///
    /// # Errors
    /// Invalid settings, unreadable state, or the address cannot be bound.
    pub fn start(settings: GatewaySettings) -> Result<Server, GatewayError> {
        let threads = settings.http_threads;
        let addr = settings.addr;
        let tls = settings
            .tls
            .clone()
            .map(crate::tls::TlsSource::load)
            .transpose()?
            .map(Arc::new);
        let plain_addr = settings.plain_addr;
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
        // Beside HTTPS, plain HTTP for this machine only (local agents, health checks).
        let plain = match plain_addr {
            Some(p) => {
                let l = runtime
                    .block_on(tokio::net::TcpListener::bind(p))
                    .map_err(|e| GatewayError::io(p.to_string(), e))?;
                let a = l
                    .local_addr()
                    .map_err(|e| GatewayError::io(p.to_string(), e))?;
                Some((l, a))
            }
            None => None,
        };
        let plain_bound = plain.as_ref().map(|(_, a)| *a);
        let (tx, rx) = tokio::sync::watch::channel(false);
        let served_tls = tls.clone();
        let app = router(gateway.clone());
        let maintained = gateway.clone();
        let maintained_reports = gateway.clone();
        let http = std::thread::Builder::new()
            .name("strata-gateway".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // They end with the runtime, when serving stops.
                    maintenance::spawn(maintained);
                    // One cap on connections for every listener of this gateway.
                    let permits =
                        Arc::new(crate::connections::Semaphore::new(limits.max_connections));
                    let plain = plain.map(|(l, _)| {
                        tokio::spawn(crate::connections::serve(
                            l,
                            app.clone(),
                            limits,
                            Arc::clone(&permits),
                            None,
                            rx.clone(),
                        ))
                    });
                    crate::connections::serve(listener, app, limits, permits, served_tls, rx).await;
                    if let Some(p) = plain {
                        let _ = p.await;
                    }
                    // Reports whose agents hung up still finish (remembered, journalled)
                    // before the runtime and its tasks are dropped.
                    let reports = &maintained_reports.report_tasks;
                    reports.close();
                    if tokio::time::timeout(REPORT_DRAIN, reports.wait())
                        .await
                        .is_err()
                    {
                        tracing::error!(
                            component = "gateway",
                            left = reports.len(),
                            "report tasks still running after {REPORT_DRAIN:?} at stop"
                        );
                    }
                })
            })
            .map_err(|e| GatewayError::io("gateway thread", e))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let plain_file = dir.join("plain-address");
        match plain_bound {
            Some(p) => std::fs::write(&plain_file, format!("http://{p}\n"))
                .map_err(|e| GatewayError::io(&plain_file, e))?,
            // A restart without the plain listener leaves no stale address behind.
            None => {
                let _ = std::fs::remove_file(&plain_file);
            }
        }
        let address_file = dir.join("address");
        std::fs::write(&address_file, format!("{scheme}://{bound}\n"))
            .map_err(|e| GatewayError::io(&address_file, e))?;
        tracing::info!(component = "gateway", address = %bound, scheme, "serving");
        Ok(Server {
            addr: bound,
            gateway,
            tls,
            plain_addr: plain_bound,
            shutdown: Some(tx),
            http: Some(http),
            learner,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://addr` when it serves TLS, else `http://addr`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://addr` of the plain-HTTP loopback listener beside HTTPS, if there is one.
    pub fn plain_url(&self) -> Option<String> {
        self.plain_addr.map(|a| format!("http://{a}"))
    }

    /// Reads the certificate and key files again; connections from now on get them
    /// (`strata serve` does this on SIGHUP). A failed reload keeps the certificate in use.
    ///
    /// # Errors
    /// [`GatewayError::Config`] when the gateway serves no TLS or a file cannot be used
    /// (named).
    pub fn reload_tls(&self) -> Result<(), GatewayError> {
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Err(GatewayError::Config(
                "this gateway serves plain HTTP: there is no certificate to reload".into(),
            )),
        }
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
            let _ = tx.send(true);
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
