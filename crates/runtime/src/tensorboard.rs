//! TensorBoard scalars: an event file TensorBoard reads as it does its own.
//!
//! The format is small and documented (TensorFlow's `record_writer` and `event.proto`):
//! each record is `u64 length | u32 masked CRC-32C of the length | payload | u32 masked
//! CRC-32C of the payload`, the payload an `Event` protobuf. The first event carries the
//! file version; each later one a `Summary` with one scalar. Writing the handful of
//! protobuf fields by hand keeps protobuf and its code generator out of the build.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Appends scalars to one event file.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates `dir` and a new event file in it, named as TensorBoard expects
    /// (`events.out.tfevents.<seconds>.<host>.<pid>`), and writes the version event.
    ///
    /// # Errors
    /// When the directory or file cannot be created.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let now = wall_time();
        let name = format!(
            "events.out.tfevents.{}.{}.{}",
            now as u64,
            host_name(),
            std::process::id()
        );
        let path = dir.join(name);
        let out = BufWriter::new(File::create(&path)?);
        let mut writer = EventWriter { path, out };
        let mut event = Vec::new();
        put_double(&mut event, 1, now);
        put_varint_field(&mut event, 2, 0);
        put_bytes(&mut event, 3, b"brain.Event:2");
        writer.write_record(&event)?;
        Ok(writer)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One scalar `tag` = `value` at `step` (buffered; see [`EventWriter::flush`]).
    ///
    /// # Errors
    /// A write error.
    pub fn scalar(&mut self, tag: &str, step: u64, value: f64) -> std::io::Result<()> {
        let mut summary_value = Vec::with_capacity(tag.len() + 8);
        put_bytes(&mut summary_value, 1, tag.as_bytes());
        // simple_value: field 2, fixed 32-bit.
        summary_value.push(2 << 3 | 5);
        summary_value.extend_from_slice(&(value as f32).to_le_bytes());
        let mut summary = Vec::with_capacity(summary_value.len() + 2);
        put_bytes(&mut summary, 1, &summary_value);
        let mut event = Vec::with_capacity(summary.len() + 24);
        put_double(&mut event, 1, wall_time());
        put_varint_field(&mut event, 2, step);
        put_bytes(&mut event, 5, &summary);
        self.write_record(&event)
    }

    /// Writes buffered events to the file.
    ///
    /// # Errors
    /// A write error.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn write_record(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let len = (payload.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc(&len).to_le_bytes())?;
        self.out.write_all(payload)?;
        self.out.write_all(&masked_crc(payload).to_le_bytes())
    }
}

fn wall_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn host_name() -> String {
    let name = fs::read_to_string("/etc/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
    put_varint(out, field << 3);
    put_varint(out, v);
}

fn put_double(out: &mut Vec<u8>, field: u64, v: f64) {
    put_varint(out, field << 3 | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, field << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The record format stores CRCs rotated and offset, so a CRC of data that itself holds
/// CRCs is not trivially zero.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xA282_EAD8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_published_check_values() {
        // The CRC catalogue's check value, and RFC 3720 (iSCSI) B.4 test vectors.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c::crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c::crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    fn records_are_framed_with_their_length_and_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalar("train/mean_return", 2048, 21.5).unwrap();
        w.flush().unwrap();
        let bytes = fs::read(w.path()).unwrap();
        let mut at = 0;
        let mut payloads = Vec::new();
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(len_crc, masked_crc(len_bytes));
            let payload = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(payload));
            payloads.push(payload.to_vec());
            at += 16 + len;
        }
        assert_eq!(payloads.len(), 2);
        assert!(payloads[0].windows(13).any(|w| w == b"brain.Event:2"));
        let scalar = &payloads[1];
        assert!(scalar.windows(17).any(|w| w == b"train/mean_return"));
        assert!(scalar.windows(4).any(|w| w == 21.5f32.to_le_bytes()));
        // step 2048 as a varint field: tag 0x10, then 0x80 0x10.
        assert!(scalar.windows(3).any(|w| w == [0x10, 0x80, 0x10]));
    }
}
