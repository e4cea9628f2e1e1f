//! Answering only once durable: durable appends grouped into one append-log sync (group
//! commit), invalidations and duplicates written at once in files of their own.

use super::files::Taken;
use super::*;

impl Writer {
    /// Group commit of durable appends: this one and every message queued behind it. The
    /// rows are written to the append log and synced (or, without one, flushed) before
    /// anyone is answered. Returns a `Close` request met on the way.
    pub(super) fn durable_group(
        &mut self,
        first: SampleBatch,
        reply: Answer,
        messages: &Receiver<Message>,
    ) -> Option<Sender<Result<(), LedgerError>>> {
        // One append-log message per (bucket, config, width) for the whole group.
        let mut logged: HashMap<LogKey, SampleBatch> = HashMap::new();
        let mut replies = vec![reply];
        let mut flushes = Vec::new();
        let mut close = None;
        let mut take = |w: &mut Self, batch: SampleBatch| {
            if w.append_log.is_some() {
                let key = (
                    batch.bucket.clone(),
                    batch.config_hash.clone(),
                    batch.obs_dim,
                );
                logged
                    .entry(key)
                    .or_insert_with(|| {
                        SampleBatch::new(&batch.bucket, &batch.config_hash, batch.obs_dim)
                    })
                    .extend_from(&batch, 0..batch.len());
            }
            w.ingest(batch);
        };
        take(self, first);
        // What was queued when the group began and no more: a producer that keeps the
        // queue full never holds this group's answers back. With company already (two or
        // more appends), the writer yields its CPU once and takes what the request tasks
        // it let run queued meanwhile: waiting costs nothing when no one else is runnable,
        // and a lone append never waits. (A timed wait of up to one sync took 16 agents
        // from 0.25 syncs per report to 0.15 but cost 4-6% of their throughput once
        // reports stopped parking a thread each; the yield gained 2%.)
        for pass in 0..2 {
            if pass == 1 {
                if replies.len() < 2 || close.is_some() {
                    break;
                }
                std::thread::yield_now();
            }
            for _ in 0..messages.len() {
                let Ok(message) = messages.try_recv() else {
                    break;
                };
                match self.absorb(message) {
                    Some(Message::DurableSamples(b, r)) => {
                        take(self, *b);
                        replies.push(r);
                    }
                    Some(Message::Flush(r)) => flushes.push(r),
                    Some(Message::Close(r)) => {
                        close = Some(r);
                        break;
                    }
                    _ => {}
                }
            }
        }
        let logged: Vec<(Bucket, arrow_array::RecordBatch)> = logged
            .into_values()
            .map(|b| (b.bucket.clone(), crate::samples::to_arrow(&b)))
            .collect();
        let result = match self.append_log.as_mut() {
            Some(log) => log
                .append(&logged)
                .map_err(|e| LedgerError::storage("appending to the durable log", e)),
            None => self.flush(),
        };
        for r in replies {
            r.give(result.clone());
        }
        if !flushes.is_empty() {
            let result = self.flush();
            for r in flushes {
                let _ = r.send(result.clone());
            }
        }
        close
    }

    /// Writes the buffered invalidations and duplicates alone, a file each, and answers
    /// those waiting for them: an acknowledged invalidation or duplicate is on disk, and in
    /// every read after it, without flushing the samples (a flush each would write a file
    /// per buffer).
    pub(super) fn commit_records(&mut self) {
        let mut taken = Vec::new();
        self.take_records(&mut taken);
        let result = if taken.is_empty() {
            Ok(())
        } else {
            let result = self.write_taken(taken).map_or(Ok(()), Err);
            self.recount();
            if let Err(e) = &result {
                *self.shared.failure.lock() = Some(e.clone());
            }
            result
        };
        for reply in self.awaiting_records.drain(..) {
            let _ = reply.send(result.clone());
        }
    }

    /// Takes the buffered invalidations and duplicates for writing, a file each.
    pub(super) fn take_records(
        &mut self,
        taken: &mut Vec<(Taken, String, arrow_array::RecordBatch)>,
    ) {
        if !self.invalidations.is_empty() {
            let rows = std::mem::take(&mut self.invalidations);
            let arrow = schema::invalidations_to_arrow(&rows);
            let name = self.file_name(Table::Invalidations.name());
            taken.push((Taken::Invalidations(rows), name, arrow));
        }
        if !self.duplicates.is_empty() {
            let rows = std::mem::take(&mut self.duplicates);
            let arrow = schema::duplicates_to_arrow(&rows);
            let name = self.file_name(Table::Duplicates.name());
            taken.push((Taken::Duplicates(rows), name, arrow));
        }
    }
}
