//! How a run's config is built, in one place: the env's preset, then a TOML file's keys
//! laid over it, then `--set KEY=VALUE` overrides. Every default is the preset's: a key no
//! layer sets keeps the preset's value, and `RunConfig::default()` is the preset of
//! [`DEFAULT_ENV`]. In files and `--set` alike, the value `"none"` turns an optional key
//! off; [`RunConfig::to_toml`] writes off keys that way, so a saved `config.toml` reads
//! back exactly ([`RunConfig::from_saved_toml`]).

use std::path::Path;

use crate::presets::{preset, DEFAULT_ENV};
use crate::{ConfigError, RunConfig};

/// The value that turns an optional key off.
const NONE: &str = "none";

/// A config file's keys, with its name for messages.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    /// Where it came from.
    pub name: String,
    /// Its keys.
    pub table: toml::Table,
}

impl ConfigFile {
    /// Reads and parses `path`.
    ///
    /// # Errors
    /// [`ConfigError::ConfigFile`] when it cannot be read, [`ConfigError::Config`] when
    /// it is not TOML (with the line and column).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ConfigFile {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses `text`, called `name` in messages.
    ///
    /// # Errors
    /// [`ConfigError::Config`] when it is not TOML (with the line and column).
    pub fn parse(name: &str, text: &str) -> Result<Self, ConfigError> {
        let table = toml::from_str(text).map_err(|e| {
            ConfigError::Config(format!("config file {name} is not valid TOML: {e}"))
        })?;
        Ok(ConfigFile {
            name: name.to_string(),
            table,
        })
    }

    /// The env it names (`env.name`), if any.
    pub fn env(&self) -> Option<&str> {
        self.table.get("env")?.get("name")?.as_str()
    }
}

impl RunConfig {
    /// The config of `env` (else the file's `env.name`, else [`DEFAULT_ENV`]): its preset,
    /// the file's keys over it, then each `KEY=VALUE` of `sets`.
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the unknown env, the file and dotted key of a bad
    /// value, or the `--set` that does not fit.
    pub fn layered(
        env: Option<&str>,
        file: Option<&ConfigFile>,
        sets: &[String],
    ) -> Result<RunConfig, ConfigError> {
        let env = env
            .or_else(|| file.and_then(ConfigFile::env))
            .unwrap_or(DEFAULT_ENV);
        let mut config = preset(env).ok_or_else(|| {
            ConfigError::Config(format!(
                "unknown env `{env}` (known: {})",
                strata_env::env_names().join(", ")
            ))
        })?;
        if let Some(f) = file {
            let mut doc = config.to_table();
            lay_over(&mut doc, f.table.clone());
            config = RunConfig::from_table(doc)
                .map_err(|e| within(&format!("in config file {}", f.name), e))?;
            config.env.name = env.to_string();
        }
        for set in sets {
            let (key, value) = set.split_once('=').ok_or_else(|| {
                ConfigError::Config(format!("--set expects KEY=VALUE, got `{set}`"))
            })?;
            config.set(key.trim(), value.trim())?;
        }
        Ok(config)
    }

    /// Any subset of the keys as TOML text, laid over the preset of the env it names
    /// (else [`DEFAULT_ENV`]): `[ppo]\ngamma = 0.9` is that preset with gamma 0.9.
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the key that is unknown or of the wrong type.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file = ConfigFile::parse("(text)", text)?;
        Self::layered(None, Some(&file), &[])
    }

    /// A complete config as [`RunConfig::to_toml`] wrote it (a run directory's
    /// `config.toml`), read exactly: nothing is taken from a preset.
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the key that is unknown or of the wrong type.
    pub fn from_saved_toml(text: &str) -> Result<Self, ConfigError> {
        let file = ConfigFile::parse("(saved config)", text)?;
        Self::from_table(file.table)
    }

    /// A config from a table holding every key (a preset with a file laid over it, say);
    /// `"none"` turns an optional key off. A value of the wrong type is an error naming
    /// its dotted key.
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the key and what was wrong, also when `"none"` is
    /// given for a key that cannot be off.
    pub fn from_table(mut table: toml::Table) -> Result<Self, ConfigError> {
        let mut off = Vec::new();
        strip_none(&mut table, "", &mut off);
        let config: RunConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let key = e.path().to_string();
                ConfigError::Config(format!("`{key}`: {}", e.into_inner().message()))
            })?;
        // A key that is still there after a round trip is not optional.
        let back = config.to_table();
        if let Some(key) = off
            .iter()
            .find(|k| lookup(&back, k).is_some_and(|v| v.as_str() != Some(NONE)))
        {
            return Err(ConfigError::Config(format!(
                "`{key}` cannot be \"{NONE}\": it is not an optional key"
            )));
        }
        Ok(config)
    }

    /// The config as TOML; optional keys that are off read `"none"`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(&self.to_table()).expect("a RunConfig always serialises")
    }

    /// Sets one dotted key (`ppo.learning_rate`) from text parsed as a TOML value (a bare
    /// word is a string; `none` turns an optional key off).
    ///
    /// # Errors
    /// [`ConfigError::Config`] naming the key when it does not exist or the value does not
    /// fit its type.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let mut doc = self.to_table();
        let parts: Vec<&str> = key.split('.').collect();
        let (last, path) = parts.split_last().expect("split yields at least one part");
        let mut table = &mut doc;
        for (depth, part) in path.iter().enumerate() {
            // A section a config leaves out when empty (`env.gym`, a kwargs table) is made
            // here; a key it may not hold is then refused by the config's own check.
            if depth > 0 && !table.contains_key(*part) {
                table.insert((*part).to_string(), toml::Value::Table(toml::Table::new()));
            }
            table = match table.get_mut(*part).and_then(toml::Value::as_table_mut) {
                Some(t) => t,
                None => {
                    return Err(ConfigError::Config(format!(
                        "unknown config key `{key}` (no section `{part}`)"
                    )))
                }
            };
        }
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        table.insert((*last).to_string(), parsed);
        *self = Self::from_table(doc)
            .map_err(|e| within(&format!("cannot set `{key}` = {value}"), e))?;
        Ok(())
    }

    /// Every key as a TOML table, off optional keys as `"none"` (TOML has no null: the
    /// serialiser leaves them out, JSON's nulls say where they were).
    pub fn to_table(&self) -> toml::Table {
        let mut table = toml::Table::try_from(self).expect("a RunConfig always serialises");
        let json = serde_json::to_value(self).expect("a RunConfig always serialises");
        mark_none(&mut table, &json);
        // Left out of the serialised form at their defaults (so older configs keep their
        // hashes), written here all the same: a shown or saved config is read back over
        // its env's preset, and a key it says nothing of would take the preset's value
        // (a `core = "lstm"` preset would turn a core the config had off back on).
        let (ppo, network) = (&self.ppo, &self.network);
        let restarts = self.runtime.max_worker_restarts;
        let mut written: Vec<(&[&str], Vec<Written>)> = vec![
            (
                &["admission"],
                vec![("pacing", toml_value(&self.admission.pacing.as_str()))],
            ),
            (
                &["ppo"],
                vec![
                    ("sequence_length", toml_value(&ppo.sequence_length)),
                    (
                        "clip_grad_per_network",
                        toml_value(&ppo.clip_grad_per_network),
                    ),
                ],
            ),
            (
                &["network"],
                vec![
                    ("encoder", toml_value(&network.encoder)),
                    ("conv_precision", toml_value(&network.conv_precision)),
                    ("sde_sample_freq", toml_value(&network.sde_sample_freq)),
                    ("core", toml_value(&network.core)),
                    ("core_size", toml_value(&network.core_size)),
                    ("core_layers", toml_value(&network.core_layers)),
                    ("core_shared", toml_value(&network.core_shared)),
                ],
            ),
            (
                &["runtime"],
                vec![(
                    "max_worker_restarts",
                    restarts.map_or_else(|| toml::Value::from(NONE), |n| toml_value(&n)),
                )],
            ),
        ];
        if self.env.gym_target().is_some() {
            let wrappers = toml_value(&self.env.gym.wrappers);
            written.push((&["env", "gym"], vec![("wrappers", wrappers)]));
        }
        for (path, keys) in written {
            let mut section = &mut table;
            for part in path {
                section = section
                    .entry(*part)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                    .as_table_mut()
                    .expect("a config section is a table");
            }
            for (key, value) in keys {
                section.entry(key).or_insert(value);
            }
        }
        table
    }
}

/// A key `to_table` writes although serde leaves it out, with its value.
type Written = (&'static str, toml::Value);

/// A config value as TOML.
fn toml_value<T: serde::Serialize>(value: &T) -> toml::Value {
    toml::Value::try_from(value).expect("a config value serialises")
}

/// A config error with what was being done in front (once: no nested `config:`).
fn within(what: &str, e: ConfigError) -> ConfigError {
    match e {
        ConfigError::Config(message) => ConfigError::Config(format!("{what}: {message}")),
        other => other,
    }
}

/// Lays `over` onto `base`, section by section.
fn lay_over(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => lay_over(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Removes every `"none"` value, recording its dotted key.
fn strip_none(table: &mut toml::Table, prefix: &str, off: &mut Vec<String>) {
    table.retain(|k, v| {
        let key = format!("{prefix}{k}");
        match v {
            toml::Value::String(s) if s == NONE => {
                off.push(key);
                false
            }
            toml::Value::Table(t) => {
                strip_none(t, &format!("{key}."), off);
                true
            }
            _ => true,
        }
    });
}

fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let (head, rest) = key.split_once('.').unwrap_or((key, ""));
    let value = table.get(head)?;
    if rest.is_empty() {
        Some(value)
    } else {
        lookup(value.as_table()?, rest)
    }
}

/// Writes `"none"` into `table` wherever `json` (the same value) holds null.
fn mark_none(table: &mut toml::Table, json: &serde_json::Value) {
    let Some(map) = json.as_object() else { return };
    for (k, v) in map {
        match v {
            serde_json::Value::Null => {
                table.insert(k.clone(), toml::Value::String(NONE.into()));
            }
            serde_json::Value::Object(_) => {
                if let Some(toml::Value::Table(t)) = table.get_mut(k) {
                    mark_none(t, v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A shown or saved config is read back over its env's preset (`--config`), and must
    /// come back as it was whatever that preset sets: every preset's PPO, network, train,
    /// runtime and admission settings on every env with a preset, including the keys
    /// left out of the hash at their defaults (`network.core = "none"` over a preset with
    /// a core), and an Atari env with its preset's wrappers taken off.
    #[test]
    fn a_shown_config_reads_back_over_any_presets_settings() {
        let names: Vec<String> = strata_env::env_names()
            .iter()
            .map(|n| (*n).to_string())
            .chain(crate::GYM_PRESETS.iter().map(|id| format!("gym:{id}")))
            .chain(["gym:Ant-v5".to_string()])
            .collect();
        for base in &names {
            let env = preset(base).unwrap().env;
            for settings in &names {
                let mut config = preset(settings).unwrap();
                config.env = env.clone();
                let text = config.to_toml();
                let back = RunConfig::from_toml(&text)
                    .unwrap_or_else(|e| panic!("{settings}'s settings on {base}: {e}\n{text}"));
                assert_eq!(back, config, "{settings}'s settings on {base}:\n{text}");
            }
        }
        let mut bare = preset("gym:ALE/Breakout-v5").unwrap();
        bare.env.gym.wrappers.clear();
        assert_eq!(RunConfig::from_toml(&bare.to_toml()).unwrap(), bare);
    }

    #[test]
    fn set_changes_one_key_and_names_unknown_ones() {
        let mut c = RunConfig::default();
        c.set("ppo.learning_rate", "0.002").unwrap();
        assert_eq!(c.ppo.learning_rate, 0.002);
        c.set("ppo.target_kl", "0.01").unwrap();
        assert_eq!(c.ppo.target_kl, Some(0.01));
        c.set("ppo.target_kl", "none").unwrap();
        assert_eq!(c.ppo.target_kl, None);
        c.set("env.name", "pendulum").unwrap();
        assert_eq!(c.env.name, "pendulum");
        c.set("network.policy_hidden", "[32, 32]").unwrap();
        assert_eq!(c.network.policy_hidden, vec![32, 32]);
        let err = c.set("ppo.learning_rat", "1").unwrap_err().to_string();
        assert!(err.contains("learning_rat"), "{err}");
        let err = c.set("nope.x", "1").unwrap_err().to_string();
        assert!(err.contains("nope"), "{err}");
        let err = c.set("ppo.n_epochs", "many").unwrap_err().to_string();
        assert!(err.contains("n_epochs"), "{err}");
        // "none" only turns optional keys off; a required one is named, not defaulted.
        let err = c.set("ppo.n_steps", "none").unwrap_err().to_string();
        assert!(err.contains("`ppo.n_steps` cannot be"), "{err}");
    }

    #[test]
    fn python_path_is_one_path_or_a_list() {
        let mut c = RunConfig::default();
        c.set("runtime.python_path", "examples").unwrap();
        assert_eq!(c.runtime.python_path, vec![PathBuf::from("examples")]);
        c.set("runtime.python_path", r#"["a", "b/c"]"#).unwrap();
        let both = vec![PathBuf::from("a"), PathBuf::from("b/c")];
        assert_eq!(c.runtime.python_path, both);
        // A plain path in a file as well, written back as the list it means.
        let mut file: toml::Table = toml::from_str(&c.to_toml()).unwrap();
        file["runtime"]["python_path"] = toml::Value::String("examples".into());
        let toml = toml::to_string(&file).unwrap();
        let read = RunConfig::from_saved_toml(&toml).unwrap();
        assert_eq!(read.runtime.python_path, vec![PathBuf::from("examples")]);
        let err = c.set("runtime.python_path", "3").unwrap_err().to_string();
        assert!(err.contains("python_path"), "{err}");
    }

    #[test]
    fn gym_kwargs_are_set_key_by_key_and_round_trip() {
        let sets = ["env.gym.kwargs.forward_reward_weight=2.0".to_string()];
        let c = RunConfig::layered(Some("gym:HalfCheetah-v5"), None, &sets).unwrap();
        assert_eq!(
            c.env.gym.kwargs["forward_reward_weight"].as_float(),
            Some(2.0)
        );
        assert_eq!(RunConfig::from_saved_toml(&c.to_toml()).unwrap(), c);
        // Built-in envs' configs leave the section out, and a made-up section is refused.
        assert!(!RunConfig::default().to_toml().contains("[env.gym"));
        let err = RunConfig::default().set("env.nope.x", "1").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let mut builtin = RunConfig::default();
        builtin.set("env.gym.kwargs.x", "1").unwrap();
        let err = builtin.validate().unwrap_err().to_string();
        assert!(err.contains("env.gym"), "{err}");
    }

    #[test]
    fn toml_round_trips_and_rejects_unknown_keys() {
        let c = RunConfig::default();
        assert_eq!(RunConfig::from_toml(&c.to_toml()).unwrap(), c);
        let err = RunConfig::from_toml("[ppo]\nlearning_rte = 1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("learning_rte"), "{err}");
    }

    /// The one default: keys a partial file leaves out are the named env's preset's, not
    /// a section's own defaults (PPO alone would say 2048 steps).
    #[test]
    fn a_partial_file_keeps_the_preset_of_its_env() {
        let c = RunConfig::from_toml("[ppo]\ngamma = 0.9\n").unwrap();
        let cartpole = preset(DEFAULT_ENV).unwrap();
        assert_eq!(c.ppo.gamma, 0.9);
        assert_eq!(c.ppo.n_steps, cartpole.ppo.n_steps);
        assert_eq!(RunConfig::default(), cartpole);
        let c = RunConfig::from_toml("[env]\nname = \"pendulum\"\n").unwrap();
        assert_eq!(c, preset("pendulum").unwrap());
        let file = ConfigFile::parse("run.toml", "[ppo]\nn_epochs = 3\n").unwrap();
        let sets = ["ppo.n_epochs=4".to_string()];
        let c = RunConfig::layered(Some("acrobot"), Some(&file), &sets).unwrap();
        assert_eq!((c.env.name.as_str(), c.ppo.n_epochs), ("acrobot", 4));
        let err = RunConfig::layered(Some("pong"), None, &[]).unwrap_err();
        assert!(err.to_string().contains("unknown env `pong`"), "{err}");
    }

    /// Per-network clipping turned off on the generic preset (which turns it on) stays off
    /// through the config `strata config show` prints and a file read back over that
    /// preset, while the config's hash stays that of a config without the key.
    #[test]
    fn per_network_clipping_turned_off_reads_back_over_the_generic_preset() {
        let generic = preset("gym:NoPresetHere-v0").unwrap();
        assert!(generic.ppo.clip_grad_per_network);
        let mut c = generic.clone();
        c.set("ppo.clip_grad_per_network", "false").unwrap();
        let text = c.to_toml();
        assert!(text.contains("clip_grad_per_network = false"), "{text}");
        let file = ConfigFile::parse("shown.toml", &text).unwrap();
        let read = RunConfig::layered(None, Some(&file), &[]).unwrap();
        assert_eq!(read, c);
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("clip_grad_per_network"), "{json}");
        assert_ne!(c.config_hash(), generic.config_hash());
    }

    /// An optional key turned off stays off through a saved `config.toml`, even where the
    /// preset has it on; a file can turn it off too.
    #[test]
    fn off_keys_survive_saving_and_files_can_turn_them_off() {
        let mut c = RunConfig::default();
        assert!(c.ppo.max_grad_norm.is_some());
        c.set("ppo.max_grad_norm", "none").unwrap();
        let text = c.to_toml();
        assert!(text.contains("max_grad_norm = \"none\""), "{text}");
        assert_eq!(RunConfig::from_saved_toml(&text).unwrap(), c);
        assert_eq!(RunConfig::from_toml(&text).unwrap(), c);
        let off = RunConfig::from_toml("[ppo]\nmax_grad_norm = \"none\"\n").unwrap();
        assert_eq!(off.ppo.max_grad_norm, None);
    }

    /// The pacing in force is shown (and saved) though the default is left out of the
    /// config hash, and setting it changes the schedule workers sample on.
    #[test]
    fn pacing_is_shown_and_set_like_any_key() {
        let mut c = preset("pendulum").unwrap();
        c.set("runtime.mode", "async").unwrap();
        c.set("admission.max_policy_lag", "4").unwrap();
        let text = c.to_toml();
        assert!(text.contains("pacing = \"fresh\""), "{text}");
        assert_eq!(RunConfig::from_saved_toml(&text).unwrap(), c);
        assert_eq!(c.sampling_lag(), 1);
        let hash = c.config_hash();
        c.set("admission.pacing", "bound").unwrap();
        assert_eq!(c.sampling_lag(), 4);
        assert_ne!(c.config_hash(), hash);
        let err = c.set("admission.pacing", "eager").unwrap_err().to_string();
        assert!(err.contains("admission.pacing"), "{err}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key() {
        let err = RunConfig::from_toml("[ppo]\nn_epochs = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`ppo.n_epochs`") && err.contains("string"),
            "{err}"
        );
        let mut table = RunConfig::default().to_table();
        table["env"]
            .as_table_mut()
            .unwrap()
            .insert("num_envs".into(), toml::Value::Boolean(true));
        let err = RunConfig::from_table(table).unwrap_err().to_string();
        assert!(err.contains("`env.num_envs`"), "{err}");
        let err = RunConfig::default()
            .set("train.total_steps", "\"many\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`train.total_steps`"), "{err}");
        // A bucket names a directory: one that cannot be is refused where it is read.
        let err = RunConfig::from_toml("[ledger]\nbucket = \"../x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`ledger.bucket`") && err.contains("../x"),
            "{err}"
        );
        // A syntax error keeps its position in the text.
        let err = RunConfig::from_toml("[ppo\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
