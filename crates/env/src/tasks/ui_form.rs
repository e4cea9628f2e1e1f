//! `ui-form`: fill in and submit a form on a screen, clicking grid cells and typing. A
//! popup sometimes appears (after an observation, so while the next action executes),
//! covers one element and blocks every click but its own close button, as a modal dialog
//! does; [`Env::context`] lists the top-level elements, so a re-check sees it.

use rand::seq::SliceRandom;

use super::{seed_from_state, seed_to_state, unit_interval};
use crate::{
    check_state, derive_seed, Env, EnvContext, EnvError, EnvRng, EnvSpec, Space, Transition,
};

/// The screen is a `GRID` x `GRID` grid of cells; a click targets one cell.
const GRID: usize = 3;
const CELLS: usize = GRID * GRID;
/// Text fields to fill in.
const FIELDS: usize = 3;
/// Action `CELLS` types into the focused field; actions `0..CELLS` click a cell.
const TYPE: usize = CELLS;
/// Chance per step that a popup appears (when none is open).
const POPUP_CHANCE: f64 = 0.05;
/// Per field: x, y, filled, focused, covered; submit: x, y, covered; popup: open, x, y.
const OBS_DIM: usize = FIELDS * 5 + 3 + 3;
/// Field cells, submit cell, focus (-1 none), filled flags, popup (-1 none), observed
/// popup, seed halves, steps.
const STATE_LEN: usize = FIELDS + 1 + 1 + FIELDS + 1 + 1 + 2 + 1;

/// The form-filling task.
#[derive(Clone, Debug, Default)]
pub struct UiForm {
    /// Cell of each field, then of the submit button.
    cells: [usize; FIELDS + 1],
    filled: [bool; FIELDS],
    focus: Option<usize>,
    /// Cell the open popup covers (its close button sits there).
    popup: Option<usize>,
    /// The popup as the last observation showed it.
    observed_popup: Option<usize>,
    seed: u64,
    steps: u64,
}

fn cell_xy(cell: usize) -> (f32, f32) {
    let (x, y) = (cell % GRID, cell / GRID);
    (
        (x as f32 + 0.5) / GRID as f32,
        (y as f32 + 0.5) / GRID as f32,
    )
}

impl UiForm {
    /// Whether the popup covers element `i` (fields, then submit).
    fn covered(&self, i: usize) -> bool {
        self.popup == Some(self.cells[i])
    }

    /// Opens a popup with a chance drawn from the episode's seed and the step.
    fn maybe_open_popup(&mut self) {
        if self.popup.is_some() {
            return;
        }
        let h = derive_seed(self.seed, self.steps);
        if unit_interval(h) < POPUP_CHANCE {
            self.popup = Some((derive_seed(h, 1) % CELLS as u64) as usize);
        }
    }
}

impl Env for UiForm {
    fn spec(&self) -> EnvSpec {
        EnvSpec {
            images: Vec::new(),
            name: "ui-form".into(),
            gymnasium_id: "none (Strata task: form filling with popups)".into(),
            observation_space: Space::Box {
                low: vec![0.0; OBS_DIM],
                high: vec![1.0; OBS_DIM],
            },
            action_space: Space::Discrete { n: CELLS + 1 },
            max_episode_steps: 40,
            reward_threshold: 7.0,
        }
    }

    fn reset(&mut self, rng: &mut EnvRng, obs: &mut [f32]) {
        let mut cells: Vec<usize> = (0..CELLS).collect();
        cells.shuffle(rng);
        self.cells.copy_from_slice(&cells[..FIELDS + 1]);
        self.filled = [false; FIELDS];
        self.focus = None;
        self.popup = None;
        self.observed_popup = None;
        self.seed = rand::Rng::random(rng);
        self.steps = 0;
        self.observe(obs);
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Transition {
        let a = (action[0].max(0.0) as usize).min(TYPE);
        let mut reward = -0.05;
        let mut done = false;
        if a == TYPE {
            if let Some(f) = self.focus {
                if !self.filled[f] && !self.covered(f) {
                    self.filled[f] = true;
                    reward += 1.0;
                }
            }
        } else if let Some(p) = self.popup {
            // Modal: only its close button responds.
            if a == p {
                self.popup = None;
            }
        } else if let Some(f) = (0..FIELDS).find(|&f| self.cells[f] == a) {
            self.focus = Some(f);
        } else if self.cells[FIELDS] == a && self.filled.iter().all(|&f| f) {
            reward += 5.0;
            done = true;
        }
        self.steps += 1;
        self.observe(obs);
        self.observed_popup = self.popup;
        if !done {
            self.maybe_open_popup();
        }
        Transition {
            reward,
            terminated: done,
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        for f in 0..FIELDS {
            let (x, y) = cell_xy(self.cells[f]);
            let o = &mut obs[f * 5..f * 5 + 5];
            o[0] = x;
            o[1] = y;
            o[2] = f32::from(u8::from(self.filled[f]));
            o[3] = f32::from(u8::from(self.focus == Some(f)));
            o[4] = f32::from(u8::from(self.covered(f)));
        }
        let (x, y) = cell_xy(self.cells[FIELDS]);
        let o = &mut obs[FIELDS * 5..];
        o[0] = x;
        o[1] = y;
        o[2] = f32::from(u8::from(self.covered(FIELDS)));
        match self.popup {
            Some(p) => {
                let (x, y) = cell_xy(p);
                o[3..6].copy_from_slice(&[1.0, x, y]);
            }
            None => o[3..6].copy_from_slice(&[0.0, 0.0, 0.0]),
        }
    }

    fn state(&self) -> Vec<f64> {
        let opt = |v: Option<usize>| v.map_or(-1.0, |c| c as f64);
        let mut s: Vec<f64> = self.cells.iter().map(|&c| c as f64).collect();
        s.push(opt(self.focus));
        s.extend(self.filled.iter().map(|&f| f64::from(u8::from(f))));
        s.push(opt(self.popup));
        s.push(opt(self.observed_popup));
        s.extend(seed_to_state(self.seed));
        s.push(self.steps as f64);
        debug_assert_eq!(s.len(), STATE_LEN);
        s
    }

    fn set_state(&mut self, state: &[f64]) -> Result<(), EnvError> {
        check_state("ui-form", state, STATE_LEN)?;
        let cell = |v: f64| -> Result<Option<usize>, EnvError> {
            if v < 0.0 {
                Ok(None)
            } else if v < CELLS as f64 && v.fract() == 0.0 {
                Ok(Some(v as usize))
            } else {
                Err(EnvError::BadState {
                    env: "ui-form".into(),
                    reason: format!("{v} is not a cell of the {GRID}x{GRID} grid"),
                })
            }
        };
        for (i, (slot, &v)) in self.cells.iter_mut().zip(state).enumerate() {
            *slot = cell(v)?.ok_or_else(|| EnvError::BadState {
                env: "ui-form".into(),
                reason: format!("element {i} has no cell"),
            })?;
        }
        self.focus = cell(state[FIELDS + 1])?.filter(|&f| f < FIELDS);
        for (filled, &v) in self.filled.iter_mut().zip(&state[FIELDS + 2..]) {
            *filled = v != 0.0;
        }
        let at = 2 * FIELDS + 2;
        self.popup = cell(state[at])?;
        self.observed_popup = cell(state[at + 1])?;
        self.seed = seed_from_state(&state[at + 2..]);
        self.steps = state[at + 4] as u64;
        Ok(())
    }

    fn success(&self, terminated: bool) -> Option<bool> {
        Some(terminated)
    }

    fn reobserve(&mut self, obs: &mut [f32]) {
        self.observed_popup = self.popup;
        self.observe(obs);
    }

    fn context(&self, current: bool) -> EnvContext {
        let popup = if current {
            self.popup
        } else {
            self.observed_popup
        };
        let mut top = vec!["form".to_string()];
        if popup.is_some() {
            top.push("popup".into());
        }
        EnvContext {
            target: None,
            ui_top_level: Some(top),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn click(env: &mut UiForm, cell: usize, obs: &mut [f32]) -> Transition {
        env.step(&[cell as f32], obs)
    }

    #[test]
    fn filling_every_field_then_submitting_succeeds() {
        let mut env = UiForm::default();
        let mut rng = EnvRng::seed_from_u64(1);
        let mut obs = vec![0.0; OBS_DIM];
        env.reset(&mut rng, &mut obs);
        let mut total = 0.0;
        let mut t = Transition {
            reward: 0.0,
            terminated: false,
        };
        for step in 0..40 {
            // A scripted agent: close a popup, else submit when done, else fill.
            let action = if let Some(p) = env.popup {
                p
            } else if env.filled.iter().all(|&f| f) {
                env.cells[FIELDS]
            } else {
                let f = (0..FIELDS).find(|&f| !env.filled[f]).unwrap();
                if env.focus == Some(f) {
                    TYPE
                } else {
                    env.cells[f]
                }
            };
            t = click(&mut env, action, &mut obs);
            total += t.reward;
            if t.terminated {
                assert!(step >= 6, "at least 3 clicks, 3 typings and a submit");
                break;
            }
        }
        assert!(t.terminated && env.success(true) == Some(true));
        assert!(total > 7.0, "{total}");
    }

    #[test]
    fn submitting_early_does_nothing_and_a_popup_is_modal_and_reported() {
        let mut env = UiForm::default();
        let mut rng = EnvRng::seed_from_u64(2);
        let mut obs = vec![0.0; OBS_DIM];
        env.reset(&mut rng, &mut obs);
        let submit = env.cells[FIELDS];
        assert!(!click(&mut env, submit, &mut obs).terminated);
        // Force a popup over field 0, as the seed would.
        env.popup = Some(env.cells[0]);
        env.observed_popup = None;
        assert_eq!(env.context(false).ui_top_level.unwrap(), ["form"]);
        assert_eq!(env.context(true).ui_top_level.unwrap(), ["form", "popup"]);
        let field1 = env.cells[1];
        click(&mut env, field1, &mut obs);
        assert_eq!(env.focus, None, "blocked by the popup");
        assert_eq!(obs[4], 1.0, "field 0 covered");
        let close = env.popup.unwrap();
        click(&mut env, close, &mut obs);
        assert_eq!(obs[FIELDS * 5 + 3], 0.0, "closed in the observation");
        assert_eq!(env.context(false).ui_top_level.unwrap(), ["form"]);
    }

    #[test]
    fn popups_appear_reproducibly_and_state_round_trips() {
        let mut env = UiForm::default();
        let mut rng = EnvRng::seed_from_u64(3);
        let mut obs = vec![0.0; OBS_DIM];
        env.reset(&mut rng, &mut obs);
        let saved = env.state();
        let mut seen = Vec::new();
        for i in 0..200 {
            // Never closes popups: each stays once open, so count openings by step.
            click(&mut env, i % CELLS, &mut obs);
            seen.push(env.state());
        }
        assert!(
            seen.iter().any(|s| s[2 * FIELDS + 2] >= 0.0),
            "a popup opened"
        );
        let mut again = UiForm::default();
        again.set_state(&saved).unwrap();
        for (i, s) in seen.iter().enumerate() {
            click(&mut again, i % CELLS, &mut obs);
            assert_eq!(&again.state(), s);
        }
        let mut bad = saved.clone();
        bad[0] = 12.0;
        assert!(again.set_state(&bad).is_err());
    }
}
