//! The gateway's journal: episodes, actions and release changes as JSON lines, so that a
//! restarted gateway continues open episodes. Each record is one `write(2)` before the
//! request is answered, so it survives the process being killed; release changes are also
//! synced (they must survive the machine). Samples are not here: they are in the ledger.
//! On start the journal is replayed and rewritten as one snapshot line, and it is
//! rewritten so again whenever it grows past a bound while serving.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::GatewayError;

/// An append-only file of JSON lines.
pub struct Journal {
    path: PathBuf,
    /// The open file and its size.
    file: Mutex<(File, u64)>,
}

impl Journal {
    /// Replays `path` (absent: nothing), calling `apply` per record; a torn last line (the
    /// process died mid-write) is ignored, a bad line elsewhere is an error.
    ///
    /// # Errors
    /// An unreadable journal (naming the line).
    pub fn replay<E: DeserializeOwned>(
        path: &Path,
        mut apply: impl FnMut(E),
    ) -> Result<(), GatewayError> {
        if path.exists() {
            let f = File::open(path).map_err(|e| GatewayError::io(path, e))?;
            let lines: Vec<String> = BufReader::new(f)
                .lines()
                .collect::<Result<_, _>>()
                .map_err(|e| GatewayError::io(path, e))?;
            let last = lines.len();
            for (i, line) in lines.iter().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<E>(line) {
                    Ok(event) => apply(event),
                    Err(e) if i + 1 == last => {
                        tracing::warn!(component = "gateway", path = %path.display(), error = %e, "ignoring a torn last journal line");
                    }
                    Err(e) => {
                        return Err(GatewayError::Journal {
                            path: path.display().to_string(),
                            line: i + 1,
                            reason: e.to_string(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Replaces `path` with the single record `snapshot` (synced, renamed into place) and
    /// opens it for appending.
    ///
    /// # Errors
    /// A write failure.
    pub fn rewrite<E: Serialize>(path: &Path, snapshot: &E) -> Result<Journal, GatewayError> {
        let (file, size) = write_snapshot(path, snapshot)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file: Mutex::new((file, size)),
        })
    }

    /// Bytes in the journal now.
    pub fn size(&self) -> u64 {
        self.file.lock().1
    }

    /// Replaces the journal with the record `snapshot` followed by what was appended after
    /// byte `taken_at` (the size when the snapshot's state was taken), so records appended
    /// while the snapshot was written are kept. Appends wait only while that tail is
    /// copied.
    ///
    /// # Errors
    /// A write failure (the old journal stays in use).
    pub fn compact<E: Serialize>(&self, snapshot: &E, taken_at: u64) -> Result<(), GatewayError> {
        use std::io::{Read, Seek, SeekFrom};
        let tmp = self.path.with_extension("jsonl.tmp");
        let io = |e| GatewayError::io(&self.path, e);
        let mut out = File::create(&tmp).map_err(io)?;
        let written = write_record(&mut out, snapshot).map_err(io)?;
        let mut f = self.file.lock();
        let mut tail = Vec::new();
        let mut old = File::open(&self.path).map_err(io)?;
        old.seek(SeekFrom::Start(taken_at)).map_err(io)?;
        old.read_to_end(&mut tail).map_err(io)?;
        out.write_all(&tail).map_err(io)?;
        out.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        *f = (file, written + tail.len() as u64);
        Ok(())
    }

    /// Appends one record (one `write(2)`); `sync` also makes it durable on disk.
    ///
    /// # Errors
    /// The write failure.
    pub fn append<E: Serialize>(&self, event: &E, sync: bool) -> Result<(), GatewayError> {
        let mut line = serde_json::to_vec(event).expect("journal records serialise");
        line.push(b'\n');
        let mut f = self.file.lock();
        f.0.write_all(&line)
            .map_err(|e| GatewayError::io(&self.path, e))?;
        f.1 += line.len() as u64;
        if sync {
            f.0.sync_data()
                .map_err(|e| GatewayError::io(&self.path, e))?;
        }
        Ok(())
    }
}

/// Writes `snapshot` as the whole journal at `path` (staged, synced, renamed into place);
/// returns the file opened for appending and its size.
fn write_snapshot<E: Serialize>(path: &Path, snapshot: &E) -> Result<(File, u64), GatewayError> {
    let tmp = path.with_extension("jsonl.tmp");
    let write = || -> std::io::Result<(File, u64)> {
        let mut f = File::create(&tmp)?;
        let written = write_record(&mut f, snapshot)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok((OpenOptions::new().append(true).open(path)?, written))
    };
    write().map_err(|e| GatewayError::io(path, e))
}

/// Writes `record` as one JSON line to `file`, streamed through a buffer (a snapshot of a
/// busy gateway is tens of megabytes: never held whole in memory); the bytes written.
fn write_record<E: Serialize>(file: &mut File, record: &E) -> std::io::Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    serde_json::to_writer(&mut out, record).map_err(std::io::Error::other)?;
    out.write_all(b"\n")?;
    out.flush()?;
    let file = out
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    use std::io::Seek;
    file.stream_position()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_ignores_a_torn_tail_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        Journal::replay::<Vec<u32>>(&path, |_| panic!("empty")).unwrap();
        let j = Journal::rewrite(&path, &Vec::<u32>::new()).unwrap();
        j.append(&vec![1u32], false).unwrap();
        j.append(&vec![2u32, 3], true).unwrap();
        drop(j);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"[4, 5").unwrap();
        let mut seen = Vec::new();
        Journal::replay::<Vec<u32>>(&path, |e| seen.extend(e)).unwrap();
        let _j = Journal::rewrite(&path, &vec![9u32]).unwrap();
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[9]\n");
        let j = Journal::rewrite(&path, &vec![9u32]).unwrap();
        j.append(&vec![10u32], false).unwrap();
        assert_eq!(j.size(), 9);
        // The snapshot's state was taken at byte 4; "[10]" came after and is kept.
        j.compact(&vec![11u32], 4).unwrap();
        j.append(&vec![12u32], false).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[11]\n[10]\n[12]\n"
        );
        assert_eq!(j.size(), 15);
        drop(j);
        std::fs::write(&path, "[1]\nnot json\n[2]\n").unwrap();
        let err = Journal::replay::<Vec<u32>>(&path, |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
