//! Writing buffers as files: each flush takes every buffer, writes a file per buffer and
//! puts back what could not be written for the next attempt.

use super::*;

/// A buffer taken for writing, restored if its file could not be written.
pub(super) enum Taken {
    Samples(LogKey, Box<SampleBatch>),
    Decisions(Bucket, Vec<DecisionRecord>),
    Invalidations(Vec<Invalidation>),
    Duplicates(Vec<DuplicateRecord>),
    Generations(Vec<GenerationRecord>),
}

impl Writer {
    pub(super) fn file_name(&mut self, dir: &str) -> String {
        self.seq += 1;
        data_file(dir, &self.session, self.seq)
    }

    /// Puts a buffer back after its file could not be written.
    pub(super) fn restore(&mut self, what: Taken) {
        match what {
            Taken::Samples(key, b) => {
                self.samples.insert(key, *b);
            }
            Taken::Decisions(bucket, rows) => {
                self.decisions.insert(bucket, rows);
            }
            Taken::Invalidations(rows) => self.invalidations.extend(rows),
            Taken::Duplicates(rows) => self.duplicates.extend(rows),
            Taken::Generations(rows) => self.generations.extend(rows),
        }
    }

    /// Writes every buffer as one group of files (what fails stays buffered for the next
    /// attempt), then answers the invalidations and duplicates it wrote.
    pub(super) fn flush(&mut self) -> Result<(), LedgerError> {
        let result = self.write_buffers();
        // An invalidation or duplicate is answered by its own file: written unless its
        // rows went back into the buffer.
        let records = match &result {
            Err(e) if !(self.invalidations.is_empty() && self.duplicates.is_empty()) => {
                Err(e.clone())
            }
            _ => Ok(()),
        };
        for reply in self.awaiting_records.drain(..) {
            let _ = reply.send(records.clone());
        }
        result
    }

    /// Rows still buffered, after a write.
    pub(super) fn recount(&mut self) -> usize {
        let left: usize = self.samples.values().map(SampleBatch::len).sum::<usize>()
            + self.decisions.values().map(Vec::len).sum::<usize>()
            + self.invalidations.len()
            + self.duplicates.len()
            + self.generations.len();
        self.buffered = left;
        if left == 0 {
            self.oldest = None;
        }
        left
    }

    pub(super) fn write_buffers(&mut self) -> Result<(), LedgerError> {
        let mut taken: Vec<(Taken, String, arrow_array::RecordBatch)> = Vec::new();
        let mut samples: Vec<_> = std::mem::take(&mut self.samples).into_iter().collect();
        samples.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, batch) in samples.into_iter().filter(|(_, b)| !b.is_empty()) {
            let dir = bucket_dir(Table::Samples, &key.0);
            let arrow = crate::samples::to_arrow(&batch);
            self.seq += 1;
            let last = batch.sample_id.iter().copied().max().unwrap_or(0);
            let name = sample_file(&dir, &self.session, self.seq, last);
            taken.push((Taken::Samples(key, Box::new(batch)), name, arrow));
        }
        let mut decisions: Vec<_> = std::mem::take(&mut self.decisions).into_iter().collect();
        decisions.sort_by(|a, b| a.0.cmp(&b.0));
        for (bucket, rows) in decisions {
            let dir = bucket_dir(Table::Decisions, &bucket);
            let arrow = schema::decisions_to_arrow(&rows);
            taken.push((Taken::Decisions(bucket, rows), self.file_name(&dir), arrow));
        }
        self.take_records(&mut taken);
        if !self.generations.is_empty() {
            let rows = std::mem::take(&mut self.generations);
            let arrow = schema::generations_to_arrow(&rows);
            let name = self.file_name(Table::Generations.name());
            taken.push((Taken::Generations(rows), name, arrow));
        }
        let mut first_error = self.write_taken(taken);
        let left = self.recount();
        self.shared.stats.lock().rows_buffered =
            self.samples.values().map(SampleBatch::len).sum::<usize>() as u64;
        if first_error.is_none() && left == 0 {
            // Every durably appended row is in the sample log now.
            if let Some(log) = self.append_log.as_mut().filter(|l| !l.is_empty()) {
                if let Err(e) = log.retire() {
                    first_error = Some(LedgerError::storage("removing append-log files", e));
                }
            }
        }
        let mut failure = self.shared.failure.lock();
        *failure = first_error.clone();
        first_error.map_or(Ok(()), Err)
    }

    /// Encodes and writes `taken` as one group of files; what fails is put back in its
    /// buffer. The first failure, if any.
    pub(super) fn write_taken(
        &mut self,
        taken: Vec<(Taken, String, arrow_array::RecordBatch)>,
    ) -> Option<LedgerError> {
        let mut first_error: Option<LedgerError> = None;
        let t0 = Instant::now();
        let mut files = Vec::with_capacity(taken.len());
        let mut encoded = Vec::with_capacity(taken.len());
        for (what, name, arrow) in taken {
            match schema::encode(&arrow) {
                Ok(bytes) => {
                    files.push((name, bytes));
                    encoded.push(what);
                }
                Err(e) => {
                    first_error.get_or_insert(LedgerError::storage(format!("encoding {name}"), e));
                    self.restore(what);
                }
            }
        }
        let t1 = Instant::now();
        let sizes: Vec<u64> = files.iter().map(|(_, b)| b.len() as u64).collect();
        let results = self.storage.put_all(files);
        let mut stats = WriterStats::default();
        for ((what, result), size) in encoded.into_iter().zip(results).zip(sizes) {
            match result {
                Ok(()) => {
                    stats.files_written += 1;
                    stats.bytes_written += size;
                    if let Taken::Samples(_, b) = &what {
                        stats.rows_written += b.len() as u64;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    self.restore(what);
                }
            }
        }
        {
            let mut s = self.shared.stats.lock();
            s.files_written += stats.files_written;
            s.bytes_written += stats.bytes_written;
            s.rows_written += stats.rows_written;
            s.encode_seconds += (t1 - t0).as_secs_f64();
            s.write_seconds += t1.elapsed().as_secs_f64();
        }
        first_error
    }
}
