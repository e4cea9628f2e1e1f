//! One process's connection to NATS: the client, its JetStream context, the run's stream,
//! key-value bucket and object store, with blocking calls that each wait a bounded time.
//!
//! The client lives on a small tokio runtime of its own (one thread), which keeps the
//! connection alive (pings, reconnects after a server restart) while the caller's threads
//! block on single calls.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, object_store, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;

use crate::names::Names;
use crate::stop::Stop;
use crate::{ClusterError, Meeting};

/// How long unconsumed fragments are remembered for deduplication of re-publishes.
pub(crate) const DEDUPE_WINDOW: Duration = Duration::from_secs(120);
/// How long the learner holds a fragment before the server would deliver it again: long,
/// because it acknowledges only once the update that trained on it is checkpointed (a
/// restarted learner recreates its consumers and gets everything unacknowledged at once).
const ACK_WAIT: Duration = Duration::from_secs(600);
/// The fragment stream's size bound; beyond it publishes are refused (back-pressure).
const STREAM_BYTES: i64 = 1 << 30;

/// A connection and the run's JetStream resources.
pub(crate) struct Link {
    client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    kv: kv::Store,
    objects: object_store::ObjectStore,
    pub(crate) names: Names,
    /// How long one call may take.
    pub(crate) timeout: Duration,
    /// The process's stop: every call in flight ends with [`ClusterError::Stopped`] when
    /// it is raised.
    stop: Stop,
    /// Last, so it outlives (is dropped after) the client and its handles.
    rt: tokio::runtime::Runtime,
}

/// A fetched fragment message: its payload and the handle that acknowledges it.
pub(crate) struct Delivery {
    pub(crate) payload: Bytes,
    pub(crate) acker: jetstream::message::Acker,
}

/// A delivered message kept only to be acknowledged later (its payload let go).
pub(crate) struct Unacked(pub(crate) jetstream::message::Acker);

impl Delivery {
    /// Keeps what acknowledging needs, and lets the payload go.
    pub(crate) fn unacked(self) -> Unacked {
        Unacked(self.acker)
    }
}

impl Link {
    /// Connects to `url` (retrying until `timeout`) and opens (or creates) run `run`'s
    /// key-value bucket and object store.
    ///
    /// # Errors
    /// [`ClusterError::Timeout`] when no server answers in time; [`ClusterError::Nats`]
    /// when the server refuses (JetStream disabled, say).
    pub(crate) fn connect(meeting: &Meeting) -> Result<Arc<Link>, ClusterError> {
        Link::connect_until(meeting, &Stop::new())
    }

    /// [`Link::connect`], given up (with [`ClusterError::Stopped`]) when `stop` is raised,
    /// which also ends every later call of the link in flight.
    pub(crate) fn connect_until(meeting: &Meeting, stop: &Stop) -> Result<Arc<Link>, ClusterError> {
        let (url, run, timeout) = (meeting.url.as_str(), meeting.run.as_str(), meeting.timeout);
        let names = Names::new(run)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strata-nats")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::nats("start the NATS client's runtime", e))?;
        let deadline = Instant::now() + timeout;
        let client = loop {
            let options = rt.block_on(
                meeting.access.apply(
                    url,
                    async_nats::ConnectOptions::new()
                        .name(format!("strata {run}"))
                        .connection_timeout(Duration::from_secs(2))
                        // After a server restart the client keeps trying for as long as
                        // the process lives; every call meanwhile times out on its own.
                        .max_reconnects(None),
                ),
            )?;
            let attempt = rt.block_on(async {
                tokio::select! {
                    attempt = tokio::time::timeout(timeout, options.connect(url)) => Some(attempt),
                    () = stop.raised() => None,
                }
            });
            let Some(attempt) = attempt else {
                return Err(ClusterError::Stopped);
            };
            match attempt {
                Ok(Ok(client)) => break client,
                _ if Instant::now() < deadline => {
                    if stop.pause(Duration::from_millis(200)) {
                        return Err(ClusterError::Stopped);
                    }
                }
                Ok(Err(e)) => {
                    return Err(ClusterError::nats(
                        format!("connect to {url}"),
                        connect_hint(&e, meeting.access.uses_tls(url)),
                    ))
                }
                Err(_) => {
                    return Err(ClusterError::Timeout {
                        what: format!("connecting to {url}"),
                        after: timeout,
                    })
                }
            }
        };
        let js = {
            let _context = rt.enter();
            jetstream::new(client.clone())
        };
        let link_timeout = timeout;
        // The bucket and the object store, opened, or created on the run name's first use.
        let kv = run_within(
            &rt,
            timeout,
            stop,
            || "open the run's key-value bucket".into(),
            open_or_create(js.get_key_value(names.bucket()), || {
                js.create_key_value(kv::Config {
                    bucket: names.bucket(),
                    history: 1,
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
            }),
        )?;
        let objects = run_within(
            &rt,
            timeout,
            stop,
            || "open the run's object store".into(),
            open_or_create(js.get_object_store(names.objects()), || {
                js.create_object_store(object_store::Config {
                    bucket: names.objects(),
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
            }),
        )?;
        Ok(Arc::new(Link {
            rt,
            client,
            js,
            kv,
            objects,
            names,
            timeout: link_timeout,
            stop: stop.clone(),
        }))
    }

    /// Runs `fut` to completion within the call timeout.
    pub(crate) fn block<T, E: std::fmt::Display>(
        &self,
        what: impl Fn() -> String,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, ClusterError> {
        run_within(&self.rt, self.timeout, &self.stop, what, fut)
    }

    /// Creates the fragment stream if it does not exist: work-queue retention (a fragment
    /// leaves the stream once the learner acknowledges it), file storage, deduplication of
    /// re-published message ids, and a size bound beyond which publishes are refused.
    pub(crate) fn ensure_stream(&self) -> Result<(), ClusterError> {
        let config = stream::Config {
            name: self.names.stream(),
            subjects: vec![self.names.all_fragments()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: DEDUPE_WINDOW,
            discard: stream::DiscardPolicy::New,
            max_bytes: STREAM_BYTES,
            ..Default::default()
        };
        self.block(|| format!("create stream {}", self.names.stream()), async {
            self.js.get_or_create_stream(config).await.map(|_| ())
        })
    }

    /// Drops every fragment in the stream (a fresh run under a name used before).
    pub(crate) fn purge_stream(&self) -> Result<(), ClusterError> {
        let stream = self.names.stream();
        self.purge(&stream, &format!("stream {stream}"))
    }

    /// Drops every object (a fresh run under a name used before: its versions and states
    /// must not be taken for this run's).
    pub(crate) fn purge_objects(&self) -> Result<(), ClusterError> {
        let objects = self.names.objects();
        // An object store is the JetStream stream `OBJ_<bucket>`.
        self.purge(
            &format!("OBJ_{objects}"),
            &format!("the object store {objects}"),
        )
    }

    /// Drops every message of JetStream stream `stream` (`what`, in errors).
    pub(crate) fn purge(&self, stream: &str, what: &str) -> Result<(), ClusterError> {
        self.block(|| format!("purge {what}"), async {
            let stream = self
                .js
                .get_stream(stream)
                .await
                .map_err(|e| e.to_string())?;
            stream.purge().await.map(|_| ()).map_err(|e| e.to_string())
        })
    }

    /// Messages in the stream (every fragment not yet acknowledged).
    pub(crate) fn stream_messages(&self) -> Result<u64, ClusterError> {
        self.block(|| format!("read stream {}", self.names.stream()), async {
            let stream = self
                .js
                .get_stream(self.names.stream())
                .await
                .map_err(|e| e.to_string())?;
            stream
                .get_info()
                .await
                .map(|i| i.state.messages)
                .map_err(|e| e.to_string())
        })
    }

    /// The learner's consumer of worker `w`'s fragments, created anew: a consumer left by
    /// a learner that died holds its unacknowledged messages until their ack wait ends; a
    /// new one delivers every message still in the stream at once.
    pub(crate) fn fresh_consumer(&self, w: usize) -> Result<consumer::PullConsumer, ClusterError> {
        let name = self.names.consumer(w);
        self.block(|| format!("create consumer {name}"), async {
            let stream = self
                .js
                .get_stream(self.names.stream())
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.delete_consumer(&name).await;
            stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.names.fragments(w),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    deliver_policy: consumer::DeliverPolicy::All,
                    max_ack_pending: 1024,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    /// The next message of `consumer`, if one arrives within `wait`; cut short (with
    /// [`ClusterError::Stopped`]) when `stop` is raised.
    pub(crate) fn fetch(
        &self,
        consumer: &consumer::PullConsumer,
        wait: Duration,
        stop: &Stop,
    ) -> Result<Option<Delivery>, ClusterError> {
        let fetched = self.block(|| "fetch a fragment".to_string(), async {
            tokio::select! {
                fetched = Link::fetch_one(consumer, wait) => fetched.map(Some),
                () = stop.raised() => Ok(None),
            }
        })?;
        fetched.ok_or(ClusterError::Stopped)
    }

    /// One fetch of at most one message, waiting at most `wait`.
    async fn fetch_one(
        consumer: &consumer::PullConsumer,
        wait: Duration,
    ) -> Result<Option<Delivery>, String> {
        let mut batch = consumer
            .fetch()
            .max_messages(1)
            .expires(wait)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        match batch.next().await {
            None => Ok(None),
            Some(Ok(message)) => {
                let (message, acker) = message.split();
                Ok(Some(Delivery {
                    payload: message.payload,
                    acker,
                }))
            }
            Some(Err(e)) => Err(e.to_string()),
        }
    }

    /// Acknowledges a delivery: the server drops the message from the stream.
    pub(crate) fn ack(&self, delivery: &Delivery) -> Result<(), ClusterError> {
        self.block(|| "acknowledge a fragment".to_string(), async {
            delivery.acker.ack().await
        })
    }

    /// Acknowledges a message kept for later.
    pub(crate) fn ack_later(&self, unacked: &Unacked) -> Result<(), ClusterError> {
        self.block(|| "acknowledge a fragment".to_string(), async {
            unacked.0.ack().await
        })
    }

    /// Publishes a fragment with its message id and waits for the stream to store it;
    /// `true` when the stream had it already (a re-publish, deduplicated).
    pub(crate) fn publish_fragment(
        &self,
        w: usize,
        id: &str,
        payload: Bytes,
    ) -> Result<bool, ClusterError> {
        let subject = self.names.fragments(w);
        self.block(|| format!("publish fragment {id}"), async {
            let message = jetstream::message::PublishMessage::build()
                .payload(payload)
                .message_id(id);
            let ack = self
                .js
                .send_publish(subject, message)
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|a| a.duplicate).map_err(|e| e.to_string())
        })
    }

    /// Publishes on core NATS (heartbeats, failures, announcements: nothing kept).
    pub(crate) fn publish(&self, subject: String, payload: Bytes) -> Result<(), ClusterError> {
        self.block(|| format!("publish on {subject}"), async {
            self.client.publish(subject.clone(), payload).await
        })
    }

    /// A subscription on core NATS.
    pub(crate) fn subscribe(&self, subject: String) -> Result<Subscription, ClusterError> {
        let inner = self.block(|| format!("subscribe to {subject}"), async {
            self.client.subscribe(subject.clone()).await
        })?;
        Ok(Subscription { inner })
    }

    /// Waits at most `wait` for `subscription`'s next message, less when `stop` (or the
    /// link's own stop) is raised.
    pub(crate) fn next(
        &self,
        subscription: &mut Subscription,
        wait: Duration,
        stop: &Stop,
    ) -> Option<Bytes> {
        self.rt.block_on(async {
            tokio::select! {
                message = tokio::time::timeout(wait, subscription.inner.next()) => {
                    message.ok().flatten().map(|m| m.payload)
                }
                () = stop.raised() => None,
                () = self.stop.raised() => None,
            }
        })
    }

    /// A key's value and revision.
    pub(crate) fn get(&self, key: &str) -> Result<Option<(Bytes, u64)>, ClusterError> {
        self.block(|| format!("read key {key}"), async {
            self.kv.entry(key).await.map(|e| {
                e.filter(|e| e.operation == kv::Operation::Put)
                    .map(|e| (e.value, e.revision))
            })
        })
    }

    /// Sets a key; returns its new revision.
    pub(crate) fn put(&self, key: &str, value: Bytes) -> Result<u64, ClusterError> {
        self.block(|| format!("write key {key}"), async {
            self.kv.put(key, value).await
        })
    }

    /// Sets a key only if it does not exist; `None` when it does.
    pub(crate) fn create(&self, key: &str, value: Bytes) -> Result<Option<u64>, ClusterError> {
        self.block(|| format!("create key {key}"), async {
            match self.kv.create(key, value).await {
                Ok(revision) => Ok(Some(revision)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// Sets a key only if its revision is still `revision` (compare-and-swap); `None` when
    /// someone else changed it first.
    pub(crate) fn swap(
        &self,
        key: &str,
        value: Bytes,
        revision: u64,
    ) -> Result<Option<u64>, ClusterError> {
        self.block(|| format!("update key {key}"), async {
            match self.kv.update(key, value, revision).await {
                Ok(revision) => Ok(Some(revision)),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// Deletes a key only if its revision is still `revision`: someone else's newer value
    /// stays (and the call fails).
    pub(crate) fn delete_if(&self, key: &str, revision: u64) -> Result<(), ClusterError> {
        self.block(
            || format!("delete key {key} at revision {revision}"),
            async { self.kv.delete_expect_revision(key, Some(revision)).await },
        )
    }

    /// Deletes a key (absent already is fine).
    pub(crate) fn delete(&self, key: &str) -> Result<(), ClusterError> {
        self.block(|| format!("delete key {key}"), async {
            self.kv.delete(key).await
        })
    }

    /// Stores an object under `name` (replacing one of that name).
    pub(crate) fn put_object(&self, name: &str, data: &[u8]) -> Result<(), ClusterError> {
        self.block(|| format!("store object {name}"), async {
            let mut reader = data;
            self.objects.put(name, &mut reader).await.map(|_| ())
        })
    }

    /// An object's bytes.
    pub(crate) fn get_object(&self, name: &str) -> Result<Vec<u8>, ClusterError> {
        self.block(|| format!("read object {name}"), async {
            let mut object = self.objects.get(name).await.map_err(|e| e.to_string())?;
            let mut data = Vec::new();
            object
                .read_to_end(&mut data)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(data)
        })
    }
}

/// Retries `op` while the server does not answer (backing off up to a second, warning
/// every five), until `stop` is raised: `None` then.
pub(crate) fn retrying<T>(
    what: &str,
    mut op: impl FnMut() -> Result<T, ClusterError>,
    stop: &Stop,
) -> Option<T> {
    let mut wait = Duration::from_millis(50);
    let mut next_report = Instant::now();
    loop {
        match op() {
            Ok(v) => return Some(v),
            Err(e) => {
                if stop.is_raised() {
                    return None;
                }
                if Instant::now() >= next_report {
                    tracing::warn!(component = "cluster", error = %e, "{what}: retrying");
                    next_report = Instant::now() + Duration::from_secs(5);
                }
                if stop.pause(wait) {
                    return None;
                }
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Runs `fut` on `rt` to completion within `timeout`, unless `stop` is raised first;
/// errors say `what` was being done.
fn run_within<T, E: std::fmt::Display>(
    rt: &tokio::runtime::Runtime,
    timeout: Duration,
    stop: &Stop,
    what: impl Fn() -> String,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, ClusterError> {
    let outcome = rt.block_on(async {
        tokio::select! {
            outcome = tokio::time::timeout(timeout, fut) => Some(outcome),
            () = stop.raised() => None,
        }
    });
    match outcome {
        None => Err(ClusterError::Stopped),
        Some(Ok(Ok(value))) => Ok(value),
        Some(Ok(Err(e))) => Err(ClusterError::nats(what(), e)),
        Some(Err(_)) => Err(ClusterError::Timeout {
            what: what(),
            after: timeout,
        }),
    }
}

/// What `get` opens, or else what `create` makes.
async fn open_or_create<T, E: std::fmt::Display, C: Future<Output = Result<T, E>>>(
    get: impl Future<Output = Result<T, impl std::fmt::Display>>,
    create: impl FnOnce() -> C,
) -> Result<T, String> {
    match get.await {
        Ok(found) => Ok(found),
        Err(_) => create().await.map_err(|e| e.to_string()),
    }
}

/// A core NATS subscription, read through [`Link::next`].
pub(crate) struct Subscription {
    inner: async_nats::Subscriber,
}

/// A refused connection's error, with what to check for the usual causes.
fn connect_hint(e: &async_nats::ConnectError, tls: bool) -> String {
    use async_nats::ConnectErrorKind as Kind;
    let certificate = e.to_string().contains("certificate");
    match e.kind() {
        Kind::AuthorizationViolation => format!(
            "{e} (the server refused the credentials: check --nats-user and its password, --nats-creds or --nats-nkey)"
        ),
        Kind::Tls | Kind::Io if certificate && tls => format!(
            "{e} (the server's certificate is not trusted: check that --nats-ca names the CA that signed it)"
        ),
        Kind::Tls | Kind::Io if certificate => format!(
            "{e} (the server speaks TLS with a certificate this machine does not trust: pass --nats-ca FILE, the CA that signed it)"
        ),
        Kind::Tls => format!("{e} (the server requires TLS: pass --nats-ca FILE or --nats-tls)"),
        _ => e.to_string(),
    }
}
