//! Pictures of episodes: [`Frame`]s drawn by the built-in classic-control envs (a small
//! rasteriser, as Gymnasium's `rgb_array` renders them, at half its size) and read back from
//! the recording file a Gymnasium env process writes ([`FrameReader`]).

use std::io::Read;
use std::path::Path;

/// One RGB picture of an env (row-major, 3 bytes a pixel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `height * width * 3` bytes.
    pub rgb: Vec<u8>,
    /// Whether it shows the first state of an episode.
    pub episode_start: bool,
}

/// An RGB colour.
type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const BLACK: Rgb = [0, 0, 0];

/// A picture being drawn, with y pointing up from the bottom row (the classic-control
/// envs' world coordinates, scaled).
struct Canvas {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Self {
        Canvas {
            width,
            height,
            rgb: WHITE.repeat(width * height),
        }
    }

    fn put(&mut self, x: i64, y: i64, colour: Rgb) {
        if x < 0 || y < 0 || x >= self.width as i64 || y >= self.height as i64 {
            return;
        }
        let row = self.height - 1 - y as usize;
        let at = (row * self.width + x as usize) * 3;
        self.rgb[at..at + 3].copy_from_slice(&colour);
    }

    /// Every pixel whose centre is within `radius` of the segment from `a` to `b`.
    fn segment(&mut self, a: (f64, f64), b: (f64, f64), radius: f64, colour: Rgb) {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = (dx * dx + dy * dy).max(1e-12);
        let x0 = (a.0.min(b.0) - radius).floor() as i64;
        let x1 = (a.0.max(b.0) + radius).ceil() as i64;
        let y0 = (a.1.min(b.1) - radius).floor() as i64;
        let y1 = (a.1.max(b.1) + radius).ceil() as i64;
        for y in y0..=y1 {
            for x in x0..=x1 {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                let t = (((px - a.0) * dx + (py - a.1) * dy) / len2).clamp(0.0, 1.0);
                let (qx, qy) = (a.0 + t * dx - px, a.1 + t * dy - py);
                if qx * qx + qy * qy <= radius * radius {
                    self.put(x, y, colour);
                }
            }
        }
    }

    fn disc(&mut self, centre: (f64, f64), radius: f64, colour: Rgb) {
        self.segment(centre, centre, radius, colour);
    }

    fn rect(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), colour: Rgb) {
        for y in y0.round() as i64..y1.round() as i64 {
            for x in x0.round() as i64..x1.round() as i64 {
                self.put(x, y, colour);
            }
        }
    }

    fn frame(self) -> Frame {
        Frame {
            width: self.width,
            height: self.height,
            rgb: self.rgb,
            episode_start: false,
        }
    }
}

/// CartPole from `[x, x_dot, theta, theta_dot]`, as Gymnasium draws it (300x200).
pub(crate) fn cartpole(state: &[f64]) -> Frame {
    let (w, h) = (300.0, 200.0);
    let scale = w / (2.4 * 2.0);
    let mut c = Canvas::new(w as usize, h as usize);
    let track = 50.0;
    c.segment((0.0, track), (w, track), 0.5, BLACK);
    let cart_x = state[0] * scale + w / 2.0;
    let (cart_w, cart_h) = (25.0, 15.0);
    c.rect(
        (cart_x - cart_w / 2.0, track),
        (cart_x + cart_w / 2.0, track + cart_h),
        BLACK,
    );
    let pivot = (cart_x, track + cart_h * 0.75);
    let pole = scale; // the pole is 1.0 long in world units
    let tip = (
        pivot.0 + pole * state[2].sin(),
        pivot.1 + pole * state[2].cos(),
    );
    c.segment(pivot, tip, 2.5, [202, 152, 101]);
    c.disc(pivot, 2.5, [129, 132, 203]);
    c.frame()
}

/// Pendulum from `[theta, theta_dot]` (250x250, upright at theta 0).
pub(crate) fn pendulum(state: &[f64]) -> Frame {
    let size = 250.0;
    let mut c = Canvas::new(size as usize, size as usize);
    let centre = (size / 2.0, size / 2.0);
    let length = size * 0.4;
    let tip = (
        centre.0 - length * state[0].sin(),
        centre.1 + length * state[0].cos(),
    );
    c.segment(centre, tip, 10.0, [204, 77, 77]);
    c.disc(centre, 3.0, BLACK);
    c.frame()
}

/// Acrobot from `[theta1, theta2, dtheta1, dtheta2]` (250x250, hanging down at 0, the
/// target height drawn as a line).
pub(crate) fn acrobot(state: &[f64]) -> Frame {
    let size = 250.0;
    let mut c = Canvas::new(size as usize, size as usize);
    let scale = size / 4.4;
    let origin = (size / 2.0, size / 2.0);
    c.segment(
        (0.0, origin.1 + scale),
        (size, origin.1 + scale),
        0.5,
        BLACK,
    );
    let p1 = (
        origin.0 + scale * state[0].sin(),
        origin.1 - scale * state[0].cos(),
    );
    let p2 = (
        p1.0 + scale * (state[0] + state[1]).sin(),
        p1.1 - scale * (state[0] + state[1]).cos(),
    );
    c.segment(origin, p1, 5.0, [0, 204, 204]);
    c.segment(p1, p2, 5.0, [0, 204, 204]);
    c.disc(origin, 5.0, [204, 204, 0]);
    c.disc(p1, 5.0, [204, 204, 0]);
    c.frame()
}

/// MountainCarContinuous from `[position, velocity]` (300x200: the hill, the flag, the car).
pub(crate) fn mountain_car(state: &[f64]) -> Frame {
    let (w, h) = (300.0, 200.0);
    let (lo, hi) = (-1.2, 0.6);
    let scale = w / (hi - lo);
    let height = |x: f64| (3.0 * x).sin() * 0.45 + 0.55;
    let mut c = Canvas::new(w as usize, h as usize);
    let mut previous = (0.0, height(lo) * scale);
    for i in 1..=100 {
        let x = lo + (hi - lo) * f64::from(i) / 100.0;
        let point = ((x - lo) * scale, height(x) * scale);
        c.segment(previous, point, 1.0, BLACK);
        previous = point;
    }
    let flag = ((0.45 - lo) * scale, height(0.45) * scale);
    c.segment(flag, (flag.0, flag.1 + 25.0), 1.0, BLACK);
    c.rect(
        (flag.0, flag.1 + 17.0),
        (flag.0 + 12.0, flag.1 + 25.0),
        [204, 204, 0],
    );
    let car = ((state[0] - lo) * scale, height(state[0]) * scale + 8.0);
    c.disc(car, 8.0, BLACK);
    c.frame()
}

/// Reads the pictures an env process appends to its recording file (`--record-file`), a
/// file read on from where the last read stopped. Per frame: a start-of-episode byte, then
/// height, width and channels (u32, little-endian), then the bytes. Grey pictures become
/// RGB; a fourth channel (alpha) is dropped.
#[derive(Debug)]
pub struct FrameReader {
    path: std::path::PathBuf,
    offset: u64,
}

impl FrameReader {
    /// A reader of `path` from its start.
    pub fn new(path: &Path) -> Self {
        FrameReader {
            path: path.to_path_buf(),
            offset: 0,
        }
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole frames appended since the last call (a frame still being written waits
    /// for the next).
    ///
    /// # Errors
    /// When the file cannot be read or a frame is malformed.
    pub fn read_new(&mut self) -> std::io::Result<Vec<Frame>> {
        use std::io::Seek;
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(std::io::SeekFrom::Start(self.offset))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        let (frames, used) = parse_frames(&data)?;
        self.offset += used as u64;
        Ok(frames)
    }
}

/// Every frame of a finished recording file.
///
/// # Errors
/// When the file cannot be read, a frame is malformed or the last one is cut short.
pub fn read_frames(path: &Path) -> std::io::Result<Vec<Frame>> {
    let data = std::fs::read(path)?;
    let (frames, used) = parse_frames(&data)?;
    if used < data.len() {
        return Err(bad_data("a cut frame at the end"));
    }
    Ok(frames)
}

fn bad_data(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// The whole frames at the start of `data`, and the bytes they take.
fn parse_frames(data: &[u8]) -> std::io::Result<(Vec<Frame>, usize)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while let Some(header) = data.get(at..at + 13) {
        let word = |i: usize| {
            u32::from_le_bytes(header[1 + 4 * i..5 + 4 * i].try_into().expect("4 bytes")) as usize
        };
        let (height, width, channels) = (word(0), word(1), word(2));
        if !matches!(channels, 1 | 3 | 4) {
            return Err(bad_data(&format!(
                "a frame of {channels} channels (1, 3 or 4)"
            )));
        }
        let len = height * width * channels;
        let Some(pixels) = data.get(at + 13..at + 13 + len) else {
            break;
        };
        let rgb = pixels
            .chunks_exact(channels)
            .flat_map(|p| {
                if channels == 1 {
                    [p[0]; 3]
                } else {
                    [p[0], p[1], p[2]]
                }
            })
            .collect();
        frames.push(Frame {
            width,
            height,
            rgb,
            episode_start: header[0] != 0,
        });
        at += 13 + len;
    }
    Ok((frames, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn colour_at(f: &Frame, x: usize, y_up: usize) -> Rgb {
        let at = ((f.height - 1 - y_up) * f.width + x) * 3;
        [f.rgb[at], f.rgb[at + 1], f.rgb[at + 2]]
    }

    #[test]
    fn the_cart_moves_with_x_and_the_pole_leans_with_theta() {
        let centred = cartpole(&[0.0, 0.0, 0.0, 0.0]);
        assert_eq!(
            (centred.width, centred.height, centred.rgb.len()),
            (300, 200, 180_000)
        );
        assert_eq!(
            colour_at(&centred, 150, 55),
            BLACK,
            "the cart at the centre"
        );
        assert_eq!(
            colour_at(&centred, 150, 120),
            [202, 152, 101],
            "the pole upright"
        );
        let right = cartpole(&[1.0, 0.0, 0.0, 0.0]);
        assert_eq!(colour_at(&right, 150, 55), WHITE);
        assert_eq!(colour_at(&right, 150 + 62, 55), BLACK, "1.0 is 62.5 pixels");
        let leaning = cartpole(&[0.0, 0.0, 0.5, 0.0]);
        assert_eq!(colour_at(&leaning, 150, 120), WHITE);
        assert_eq!(colour_at(&leaning, 150 + 30, 61 + 55), [202, 152, 101]);
    }

    #[test]
    fn every_classic_picture_has_its_size_and_something_drawn() {
        for f in [
            pendulum(&[1.0, 0.0]),
            acrobot(&[0.3, 0.2, 0.0, 0.0]),
            mountain_car(&[-0.5, 0.0]),
        ] {
            assert_eq!(f.rgb.len(), f.width * f.height * 3);
            let drawn = f.rgb.chunks_exact(3).filter(|p| *p != WHITE).count();
            assert!(drawn > 100 && drawn < f.width * f.height / 2, "{drawn}");
        }
    }

    #[test]
    fn recorded_frames_are_read_back_grey_and_rgba_as_rgb() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames");
        let mut data = Vec::new();
        for (start, channels, pixels) in [
            (1u8, 1u32, vec![7u8, 9]),
            (0, 4, vec![1, 2, 3, 4, 5, 6, 7, 8]),
        ] {
            data.push(start);
            for v in [1u32, 2, channels] {
                data.extend(v.to_le_bytes());
            }
            data.extend(pixels);
        }
        std::fs::write(&path, &data[..20]).unwrap();
        let mut reader = FrameReader::new(&path);
        assert_eq!(
            reader.read_new().unwrap().len(),
            1,
            "the second is still being written"
        );
        std::fs::write(&path, &data).unwrap();
        assert_eq!(reader.read_new().unwrap().len(), 1, "the second, now whole");
        let frames = read_frames(&path).unwrap();
        assert_eq!(frames[0].rgb, [7, 7, 7, 9, 9, 9]);
        assert!(frames[0].episode_start && !frames[1].episode_start);
        assert_eq!(frames[1].rgb, [1, 2, 3, 5, 6, 7]);
        std::fs::write(&path, &data[..data.len() - 1]).unwrap();
        assert!(read_frames(&path).unwrap_err().to_string().contains("cut"));
    }
}
