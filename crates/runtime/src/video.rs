//! Videos of episodes: an animated GIF written frame by frame as the env draws them, so a
//! long recording never sits in memory. GIF plays in every browser and in the HTML report
//! without a codec or an external program.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use strata_env::Frame;

use crate::RuntimeError;

/// Hundredths of a second a frame shows: 30 frames a second.
const DELAY_CS: u16 = 3;
/// How hard NeuQuant works on pictures of more than 256 colours (1 best, 30 fastest).
const QUANTISE_SPEED: i32 = 10;

/// An animated GIF being written. A frame that starts an episode is held back until the
/// next frame arrives, so the first state of an episode that was never played (the reset
/// after the last recorded one) is left out.
pub struct GifWriter {
    path: PathBuf,
    encoder: Option<gif::Encoder<BufWriter<File>>>,
    file: Option<File>,
    size: (usize, usize),
    held: Option<Frame>,
    written: usize,
}

impl GifWriter {
    /// A GIF at `path` (written in place; the caller names a new file).
    ///
    /// # Errors
    /// [`RuntimeError::Io`] when the file cannot be created.
    pub fn create(path: &Path) -> Result<Self, RuntimeError> {
        let file = File::create(path).map_err(|e| io(path, &e))?;
        Ok(GifWriter {
            path: path.to_path_buf(),
            encoder: None,
            file: Some(file),
            size: (0, 0),
            held: None,
            written: 0,
        })
    }

    /// Adds `frames` in order.
    ///
    /// # Errors
    /// [`RuntimeError::Io`] when writing fails or a frame's size differs from the first's.
    pub fn push(&mut self, frames: Vec<Frame>) -> Result<(), RuntimeError> {
        for frame in frames {
            if let Some(previous) = self.held.take() {
                self.write(&previous)?;
            }
            if frame.episode_start {
                self.held = Some(frame);
            } else {
                self.write(&frame)?;
            }
        }
        Ok(())
    }

    /// Finishes the file (a held episode start is dropped); returns the frames written.
    ///
    /// # Errors
    /// [`RuntimeError::Io`] when the file cannot be finished.
    pub fn finish(mut self) -> Result<usize, RuntimeError> {
        if let Some(encoder) = self.encoder.take() {
            encoder
                .into_inner()
                .and_then(|mut w| std::io::Write::flush(&mut w))
                .map_err(|e| io(&self.path, &e))?;
        }
        Ok(self.written)
    }

    fn write(&mut self, frame: &Frame) -> Result<(), RuntimeError> {
        let (w, h) = (frame.width, frame.height);
        if self.encoder.is_none() {
            let too_big = |n: usize| u16::try_from(n).is_err();
            if too_big(w) || too_big(h) || w == 0 || h == 0 {
                return Err(RuntimeError::Config(format!(
                    "a {w}x{h} picture cannot be a GIF (1 to 65535 pixels a side)"
                )));
            }
            let file = self.file.take().expect("the file before the first frame");
            let mut encoder = gif::Encoder::new(BufWriter::new(file), w as u16, h as u16, &[])
                .map_err(|e| gif_error(&self.path, &e))?;
            encoder
                .set_repeat(gif::Repeat::Infinite)
                .map_err(|e| gif_error(&self.path, &e))?;
            self.encoder = Some(encoder);
            self.size = (w, h);
        }
        if (w, h) != self.size {
            return Err(RuntimeError::Config(format!(
                "the env's pictures changed size, from {}x{} to {w}x{h}",
                self.size.0, self.size.1
            )));
        }
        let mut out = indexed(frame).unwrap_or_else(|| {
            gif::Frame::from_rgb_speed(w as u16, h as u16, &frame.rgb, QUANTISE_SPEED)
        });
        out.delay = DELAY_CS;
        let encoder = self.encoder.as_mut().expect("made above");
        encoder
            .write_frame(&out)
            .map_err(|e| gif_error(&self.path, &e))?;
        self.written += 1;
        Ok(())
    }
}

/// The frame with an exact palette when it has at most 256 colours (drawn envs and
/// Atari's screens do), which is faster and truer than quantising.
fn indexed(frame: &Frame) -> Option<gif::Frame<'static>> {
    let mut palette: HashMap<[u8; 3], u8> = HashMap::new();
    let mut colours = Vec::new();
    let mut pixels = Vec::with_capacity(frame.width * frame.height);
    let mut last: Option<([u8; 3], u8)> = None;
    for p in frame.rgb.chunks_exact(3) {
        let c = [p[0], p[1], p[2]];
        let index = match last {
            Some((colour, index)) if colour == c => index,
            _ => {
                let index = match palette.get(&c) {
                    Some(&i) => i,
                    None => {
                        let i = u8::try_from(palette.len()).ok()?;
                        palette.insert(c, i);
                        colours.extend_from_slice(&c);
                        i
                    }
                };
                last = Some((c, index));
                index
            }
        };
        pixels.push(index);
    }
    let mut out = gif::Frame::from_palette_pixels(
        frame.width as u16,
        frame.height as u16,
        pixels,
        colours,
        None,
    );
    out.dispose = gif::DisposalMethod::Keep;
    Some(out)
}

fn io(path: &Path, e: &std::io::Error) -> RuntimeError {
    RuntimeError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(e.kind(), e.to_string()),
    }
}

fn gif_error(path: &Path, e: &gif::EncodingError) -> RuntimeError {
    RuntimeError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("writing a GIF: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(colour: u8, start: bool, colours: usize) -> Frame {
        let (width, height) = (20, 10);
        let rgb = (0..width * height)
            .flat_map(|i| [colour, (i % colours) as u8, (i / 256) as u8])
            .collect();
        Frame {
            width,
            height,
            rgb,
            episode_start: start,
        }
    }

    #[test]
    fn frames_are_written_in_order_and_a_trailing_episode_start_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.gif");
        let mut gif = GifWriter::create(&path).unwrap();
        gif.push(vec![frame(1, true, 4), frame(2, false, 4)])
            .unwrap();
        gif.push(vec![
            frame(3, true, 200),
            frame(4, false, 200),
            frame(5, true, 4),
        ])
        .unwrap();
        assert_eq!(gif.finish().unwrap(), 4);
        let mut decoder = gif::DecodeOptions::new();
        decoder.set_color_output(gif::ColorOutput::RGBA);
        let mut read = decoder.read_info(File::open(&path).unwrap()).unwrap();
        let mut reds = Vec::new();
        while let Some(f) = read.read_next_frame().unwrap() {
            assert_eq!((f.width, f.height, f.delay), (20, 10, DELAY_CS));
            reds.push(f.buffer[0]);
        }
        assert_eq!(reds, [1, 2, 3, 4], "exact colours, the last start left out");
    }

    #[test]
    fn many_colours_are_quantised_and_a_size_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut gif = GifWriter::create(&dir.path().join("v.gif")).unwrap();
        let mut rich = frame(9, false, 300);
        rich.rgb
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = (i * 7) as u8);
        gif.push(vec![rich]).unwrap();
        let small = Frame {
            width: 2,
            height: 2,
            rgb: vec![0; 12],
            episode_start: false,
        };
        let error = gif.push(vec![small]).unwrap_err().to_string();
        assert!(error.contains("20x10 to 2x2"), "{error}");
    }
}
