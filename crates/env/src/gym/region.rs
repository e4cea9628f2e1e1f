//! The shared-memory region one env process and its Rust owner exchange steps through: an
//! anonymous memory file (`memfd`), so nothing is left in `/dev/shm` however either side
//! dies, mapped by both. The layout (a 64-byte header, then arrays at 64-byte aligned
//! offsets) is mirrored by `REGION_ARRAYS` in `python/strata_gym_worker.py`.

use super::protocol::Command;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapMut;

/// Identifies a Strata region ("STRG", little-endian).
const MAGIC: u32 = 0x4752_5453;
/// Bumped whenever the layout changes; the worker refuses a region of another version.
pub(crate) const PROTOCOL: u32 = 4;
const HEADER: usize = 64;
/// The header's words after magic, protocol, k, obs and action widths (all little-endian):
/// how long the worker may spin for a command (ns, 0: never), the command's code, the
/// command's sequence number, the sequence number of the last command done, and whether
/// that one failed (its traceback is in the error area).
const SPIN_NS: usize = 20;
const CMD_CODE: usize = 24;
const CMD_SEQ: usize = 32;
const DONE_SEQ: usize = 40;
const FAILED: usize = 48;
/// The observations' byte width (their image values), after the commands' words.
const OBS_BYTES: usize = 56;

/// Where each array lives, in bytes from the start of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Offsets {
    actions: usize,
    obs: usize,
    obs_pixels: usize,
    final_obs: usize,
    final_pixels: usize,
    rewards: usize,
    clock: usize,
    seeds: usize,
    terminated: usize,
    truncated: usize,
    success: usize,
    game_return: usize,
    game_length: usize,
    game_over: usize,
    /// A failed command's traceback: a u32 length, then UTF-8.
    error: usize,
    end: usize,
}

/// Room for a failed command's traceback (longer ones keep their end).
const ERROR_BYTES: usize = 64 * 1024;

fn align(n: usize) -> usize {
    n.div_ceil(64) * 64
}

impl Offsets {
    /// The layout for `k` envs with observations of `obs.0` floats and `obs.1` bytes and
    /// `act_dim` action values, in the order of the worker's `REGION_ARRAYS`.
    fn new(k: usize, (obs_dim, obs_bytes): (usize, usize), act_dim: usize) -> Self {
        let mut at = HEADER;
        let mut next = |bytes: usize| {
            let here = at;
            at = align(at + bytes);
            here
        };
        let actions = next(k * act_dim * 4);
        let obs = next(k * obs_dim * 4);
        let obs_pixels = next(k * obs_bytes);
        let final_obs = next(k * obs_dim * 4);
        let final_pixels = next(k * obs_bytes);
        let rewards = next(k * 8);
        let clock = next(k * 8);
        let seeds = next(k * 8);
        let terminated = next(k);
        let truncated = next(k);
        let success = next(k);
        let game_return = next(k * 8);
        let game_length = next(k * 8);
        let game_over = next(k);
        let error = next(ERROR_BYTES);
        Offsets {
            actions,
            obs,
            obs_pixels,
            final_obs,
            final_pixels,
            rewards,
            clock,
            seeds,
            terminated,
            truncated,
            success,
            game_return,
            game_length,
            game_over,
            error,
            end: at,
        }
    }
}

/// What an env's step left in the region, borrowed while the process is idle.
pub(crate) struct StepView<'a> {
    pub(crate) obs: &'a [f32],
    pub(crate) obs_pixels: &'a [u8],
    pub(crate) final_obs: &'a [f32],
    pub(crate) final_pixels: &'a [u8],
    pub(crate) rewards: &'a [f64],
    pub(crate) clock: &'a [u64],
    pub(crate) terminated: &'a [u8],
    pub(crate) truncated: &'a [u8],
    pub(crate) success: &'a [u8],
    /// A whole game's raw score, where `game_over` is 2.
    pub(crate) game_return: &'a [f64],
    /// A whole game's steps, where `game_over` is 2.
    pub(crate) game_length: &'a [u64],
    /// At an episode's end: 0, it is the episode users count; 1, a life lost in a game
    /// that goes on (the `atari` wrapper); 2, the game ended too.
    pub(crate) game_over: &'a [u8],
}

/// One process's region: `k` envs' actions, observations, rewards, flags, final
/// observations, env clocks and reset seeds.
///
/// Access discipline: the child touches the region only between a command and its reply,
/// and the owner only outside that window ([`super::process::EnvProcess`] enforces it by
/// taking `&mut` for both), so the two never access it at the same time.
pub(crate) struct Region {
    file: File,
    map: MmapMut,
    at: Offsets,
    k: usize,
    /// An observation's floats (its values outside images).
    obs_dim: usize,
    /// An observation's bytes (its image values).
    obs_bytes: usize,
    act_dim: usize,
}

impl Region {
    /// Creates a zeroed region for `k` envs whose observations are `obs.0` floats and
    /// `obs.1` bytes, and writes its header.
    ///
    /// # Errors
    /// When the memory file cannot be created, sized or mapped.
    pub(crate) fn create(
        k: usize,
        (obs_dim, obs_bytes): (usize, usize),
        act_dim: usize,
    ) -> std::io::Result<Self> {
        let at = Offsets::new(k, (obs_dim, obs_bytes), act_dim);
        // Named after the trainer's process, so what is left of a trainer can be told
        // apart from another's (`/proc/*/maps` shows `memfd:strata-gym-PID`).
        let name = format!("strata-gym-{}", std::process::id());
        let fd = rustix::fs::memfd_create(name.as_str(), rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        file.set_len(at.end as u64)?;
        // SAFETY: the file is ours alone until the child is started, and afterwards the
        // child accesses it only while the owner waits (see the type's docs). Its size is
        // fixed: nobody truncates it while mapped.
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        for (i, value) in [MAGIC, PROTOCOL, k as u32, obs_dim as u32, act_dim as u32]
            .into_iter()
            .enumerate()
        {
            map[i * 4..i * 4 + 4].copy_from_slice(&value.to_le_bytes());
        }
        map[OBS_BYTES..OBS_BYTES + 4].copy_from_slice(&(obs_bytes as u32).to_le_bytes());
        Ok(Region {
            file,
            map,
            at,
            k,
            obs_dim,
            obs_bytes,
            act_dim,
        })
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-byte aligned offset in the header (the mapping is
        // page-aligned and outlives the borrow); both processes access these words
        // atomically only.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU32>() }
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: as in `word32`, 8-byte aligned.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// Lets the worker spin this long for a command before it sleeps on the socket.
    pub(crate) fn set_spin(&self, ns: u32) {
        self.word32(SPIN_NS).store(ns, Ordering::Relaxed);
    }

    /// Posts `command`: the worker sees it by its new sequence number (spinning) or
    /// by the byte the caller sends next (sleeping). Returns the number.
    pub(crate) fn post(&self, command: Command) -> u64 {
        self.word32(CMD_CODE)
            .store(u32::from(command.byte()), Ordering::Relaxed);
        // Release: the command's inputs (actions, seeds) are visible before the number.
        self.word64(CMD_SEQ).fetch_add(1, Ordering::Release) + 1
    }

    /// The sequence number of the last command the worker finished.
    pub(crate) fn done(&self) -> u64 {
        // Acquire: what the worker wrote before it is visible after.
        self.word64(DONE_SEQ).load(Ordering::Acquire)
    }

    /// Whether the last command finished failed.
    pub(crate) fn failed(&self) -> bool {
        self.word64(FAILED).load(Ordering::Acquire) != 0
    }

    /// The traceback of the last failed command.
    pub(crate) fn error_text(&self) -> String {
        let at = self.at.error;
        let len = u32::from_le_bytes(self.map[at..at + 4].try_into().expect("four bytes")) as usize;
        let text = &self.map[at + 4..at + 4 + len.min(ERROR_BYTES - 4)];
        String::from_utf8_lossy(text).into_owned()
    }

    /// The memory file, for the child to map.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// `count` values of `T` at byte `offset`.
    fn slice<T: Plain>(&self, offset: usize, count: usize) -> &[T] {
        let bytes = &self.map[offset..offset + count * size_of::<T>()];
        // SAFETY: offsets are 64-byte aligned within a page-aligned mapping, the range is
        // in bounds (checked by the slice above), and every bit pattern is a valid `T`.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), count) }
    }

    fn slice_mut<T: Plain>(&mut self, offset: usize, count: usize) -> &mut [T] {
        let bytes = &mut self.map[offset..offset + count * size_of::<T>()];
        // SAFETY: as in `slice`; `&mut self` makes the borrow exclusive on this side.
        unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), count) }
    }

    /// The actions the next step applies, `k * act_dim`.
    pub(crate) fn actions_mut(&mut self) -> &mut [f32] {
        let (at, n) = (self.at.actions, self.k * self.act_dim);
        self.slice_mut(at, n)
    }

    /// Seeds of the next reset, one per env.
    pub(crate) fn seeds_mut(&mut self) -> &mut [u64] {
        let (at, n) = (self.at.seeds, self.k);
        self.slice_mut(at, n)
    }

    /// Each env's clock: the worker increments it per step; the owner sets it on restore.
    pub(crate) fn clock_mut(&mut self) -> &mut [u64] {
        let (at, n) = (self.at.clock, self.k);
        self.slice_mut(at, n)
    }

    /// The current observations: `k` rows of floats, `k` rows of bytes.
    pub(crate) fn obs(&self) -> (&[f32], &[u8]) {
        (
            self.slice(self.at.obs, self.k * self.obs_dim),
            self.slice(self.at.obs_pixels, self.k * self.obs_bytes),
        )
    }

    /// Everything the last step wrote.
    pub(crate) fn step_view(&self) -> StepView<'_> {
        let (k, d, b) = (self.k, self.obs_dim, self.obs_bytes);
        StepView {
            obs: self.slice(self.at.obs, k * d),
            obs_pixels: self.slice(self.at.obs_pixels, k * b),
            final_obs: self.slice(self.at.final_obs, k * d),
            final_pixels: self.slice(self.at.final_pixels, k * b),
            rewards: self.slice(self.at.rewards, k),
            clock: self.slice(self.at.clock, k),
            terminated: self.slice(self.at.terminated, k),
            truncated: self.slice(self.at.truncated, k),
            success: self.slice(self.at.success, k),
            game_return: self.slice(self.at.game_return, k),
            game_length: self.slice(self.at.game_length, k),
            game_over: self.slice(self.at.game_over, k),
        }
    }
}

/// Plain numbers: any bit pattern is a valid value.
trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for f64 {}
impl Plain for u64 {}
impl Plain for u8 {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_aligned_and_disjoint() {
        let at = Offsets::new(3, (17, 100), 6);
        let starts = [
            at.actions,
            at.obs,
            at.obs_pixels,
            at.final_obs,
            at.final_pixels,
            at.rewards,
            at.clock,
            at.seeds,
            at.terminated,
            at.truncated,
            at.success,
            at.game_return,
            at.game_length,
            at.game_over,
        ];
        assert!(starts.iter().all(|s| s % 64 == 0));
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(at.obs - at.actions, align(3 * 6 * 4));
        assert_eq!(at.error, at.game_over + 64);
        assert_eq!(at.end, at.error + ERROR_BYTES);
    }

    #[test]
    fn a_region_starts_with_its_header_and_holds_what_is_written() {
        let mut region = Region::create(2, (3, 4), 1).unwrap();
        assert_eq!(&region.map[0..4], &MAGIC.to_le_bytes());
        assert_eq!(&region.map[12..16], &3u32.to_le_bytes());
        region.actions_mut().copy_from_slice(&[1.0, 2.0]);
        region.seeds_mut().copy_from_slice(&[7, 9]);
        assert_eq!(region.slice::<f32>(region.at.actions, 2), &[1.0, 2.0]);
        assert_eq!(region.slice::<u64>(region.at.seeds, 2), &[7, 9]);
        assert_eq!(region.obs(), (&[0.0; 6][..], &[0u8; 8][..]));
        assert_eq!(&region.map[OBS_BYTES..OBS_BYTES + 4], &4u32.to_le_bytes());
    }
}
