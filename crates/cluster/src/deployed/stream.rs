//! The run's deployed stream on the server: created by the learner, published to by every
//! gateway, read by the learner's one durable consumer.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::link::{Link, Unacked, DEDUPE_WINDOW};
use crate::stop::Stop;
use crate::ClusterError;

/// How long the learner holds a message before the server would deliver it again: long,
/// as with fragments, because it acknowledges only once the update that trained on it is
/// checkpointed (a restarted learner recreates its consumer and gets everything
/// unacknowledged at once).
const ACK_WAIT: Duration = Duration::from_secs(600);
/// The stream's size bound; beyond it publishes are refused (back-pressure: gateways
/// shed segments, counted, and keep serving).
const STREAM_BYTES: i64 = 1 << 30;
/// Messages the learner may hold unacknowledged: enough for many updates of segments.
const MAX_ACK_PENDING: i64 = 1 << 16;

/// A message of the deployed stream: its payload and acknowledgement handle.
pub(crate) struct Delivered {
    pub(crate) payload: Bytes,
    pub(crate) acker: Unacked,
}

/// The two streams of the deployed loop: segments, and invalidations apart from them, so
/// that a stream full of segments never refuses an invalidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deployed {
    /// Segments of reported steps.
    Segments,
    /// Relayed invalidations.
    Invalidations,
}

impl Deployed {
    /// Both streams.
    pub(crate) const BOTH: [Deployed; 2] = [Deployed::Segments, Deployed::Invalidations];

    fn name(self, names: &crate::names::Names) -> String {
        match self {
            Deployed::Segments => names.deployed_stream(),
            Deployed::Invalidations => names.invalidation_stream(),
        }
    }

    fn subjects(self, names: &crate::names::Names) -> String {
        match self {
            Deployed::Segments => names.all_deployed_segments(),
            Deployed::Invalidations => names.all_deployed_invalidations(),
        }
    }

    fn max_bytes(self) -> i64 {
        match self {
            Deployed::Segments => STREAM_BYTES,
            // Invalidations are small and few: this bound is never the one reached.
            Deployed::Invalidations => STREAM_BYTES / 8,
        }
    }
}

impl Link {
    /// Creates the deployed streams if they do not exist: work-queue retention (a message
    /// leaves once the learner acknowledges it), file storage, deduplication by message
    /// id, and a size bound beyond which publishes are refused.
    pub(crate) fn ensure_deployed_streams(&self) -> Result<(), ClusterError> {
        for kind in Deployed::BOTH {
            let name = kind.name(&self.names);
            let config = stream::Config {
                name: name.clone(),
                subjects: vec![kind.subjects(&self.names)],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                duplicate_window: DEDUPE_WINDOW,
                discard: stream::DiscardPolicy::New,
                max_bytes: kind.max_bytes(),
                ..Default::default()
            };
            self.block(|| format!("create stream {name}"), async {
                let mut stream = self
                    .js
                    .get_or_create_stream(config.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                // A stream made by an earlier version with other subjects takes these
                // (segments first: their narrower subjects make room for invalidations').
                let info = stream.info().await.map_err(|e| e.to_string())?;
                if info.config.subjects != config.subjects {
                    self.js
                        .update_stream(config)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            })?;
        }
        Ok(())
    }

    /// Whether the deployed streams exist (a learner that takes gateways' reports made
    /// them).
    pub(crate) fn has_deployed_streams(&self) -> Result<bool, ClusterError> {
        for kind in Deployed::BOTH {
            let name = kind.name(&self.names);
            let found = self.block(|| format!("look up stream {name}"), async {
                match self.js.get_stream(&name).await {
                    Ok(_) => Ok(true),
                    Err(e)
                        if matches!(
                            e.kind(),
                            jetstream::context::GetStreamErrorKind::JetStream(_)
                        ) =>
                    {
                        Ok(false)
                    }
                    Err(e) => Err(e),
                }
            })?;
            if !found {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Drops every message of the deployed streams (a fresh run under a name used before).
    pub(crate) fn purge_deployed(&self) -> Result<(), ClusterError> {
        for kind in Deployed::BOTH {
            let name = kind.name(&self.names);
            self.purge(&name, &format!("stream {name}"))?;
        }
        Ok(())
    }

    /// Messages in the deployed streams: every segment and invalidation not yet
    /// acknowledged by the learner.
    pub(crate) fn deployed_messages(&self) -> Result<u64, ClusterError> {
        let mut total = 0;
        for kind in Deployed::BOTH {
            let name = kind.name(&self.names);
            total += self.block(|| format!("read stream {name}"), async {
                let mut stream = self.js.get_stream(&name).await.map_err(|e| e.to_string())?;
                stream
                    .info()
                    .await
                    .map(|i| i.state.messages)
                    .map_err(|e| e.to_string())
            })?;
        }
        Ok(total)
    }

    /// Publishes on the deployed stream with message id `id` and waits for the stream to
    /// store it; `true` when it had it already (a re-publish, deduplicated).
    pub(crate) fn publish_deployed(
        &self,
        subject: String,
        id: &str,
        payload: Bytes,
    ) -> Result<bool, ClusterError> {
        self.block(|| format!("publish {id} on {subject}"), async {
            let message = jetstream::message::PublishMessage::build()
                .payload(payload)
                .message_id(id);
            let ack = self
                .js
                .send_publish(subject.clone(), message)
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|a| a.duplicate).map_err(|e| e.to_string())
        })
    }

    /// The learner's consumer `name` of deployed stream `kind`, created anew so that every
    /// message a learner that died left unacknowledged is delivered at once.
    pub(crate) fn fresh_deployed_consumer(
        &self,
        kind: Deployed,
        name: &str,
    ) -> Result<consumer::PullConsumer, ClusterError> {
        let stream_name = kind.name(&self.names);
        let filter = kind.subjects(&self.names);
        self.block(|| format!("create consumer {name}"), async {
            let stream = self
                .js
                .get_stream(&stream_name)
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.delete_consumer(name).await;
            stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(name.to_string()),
                    filter_subject: filter.clone(),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    deliver_policy: consumer::DeliverPolicy::All,
                    max_ack_pending: MAX_ACK_PENDING,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    /// Up to `max` messages of `consumer`, waiting at most `wait` for the first; empty
    /// when none is pending. Cut short (with [`ClusterError::Stopped`]) by `stop`.
    pub(crate) fn fetch_deployed(
        &self,
        consumer: &consumer::PullConsumer,
        max: usize,
        wait: Duration,
        stop: &Stop,
    ) -> Result<Vec<Delivered>, ClusterError> {
        let fetched = self.block(|| "fetch from the deployed stream".to_string(), async {
            tokio::select! {
                fetched = fetch_batch(consumer, max, wait) => fetched.map(Some),
                () = stop.raised() => Ok(None),
            }
        })?;
        fetched.ok_or(ClusterError::Stopped)
    }

    /// Messages `consumer` has yet to deliver.
    pub(crate) fn undelivered(
        &self,
        consumer: &mut consumer::PullConsumer,
    ) -> Result<u64, ClusterError> {
        self.block(|| "read a deployed consumer".to_string(), async {
            consumer.info().await.map(|i| i.num_pending)
        })
    }

    /// Acknowledges every message in `messages` and waits for the server to confirm each:
    /// it drops them from the stream, and none is delivered again.
    pub(crate) fn ack_all(&self, messages: &[Unacked]) -> Result<(), ClusterError> {
        self.block(|| "acknowledge deployed messages".to_string(), async {
            // At once, not one round trip after another: a batch of many segments is
            // acknowledged within one call's timeout even far from the server.
            let acks = messages.iter().map(|m| m.0.double_ack());
            for result in futures_util::future::join_all(acks).await {
                result?;
            }
            Ok::<_, async_nats::Error>(())
        })
    }
}

/// One fetch of at most `max` messages.
async fn fetch_batch(
    consumer: &consumer::PullConsumer,
    max: usize,
    wait: Duration,
) -> Result<Vec<Delivered>, String> {
    let mut batch = consumer
        .fetch()
        .max_messages(max)
        .expires(wait)
        .messages()
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(message) = batch.next().await {
        let (message, acker) = message.map_err(|e| e.to_string())?.split();
        out.push(Delivered {
            payload: message.payload,
            acker: Unacked(acker),
        });
    }
    Ok(out)
}
