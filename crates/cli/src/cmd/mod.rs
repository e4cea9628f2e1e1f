//! The commands, a file each (`strata train`, `eval`, `config`, `env`, `learner` and
//! `worker`, `ledger`, `serve`, `fleet`), and the arguments several share (`config_args`,
//! `nats_args`). The grammar that puts them together is `commands.rs`.

pub mod cluster;
pub mod config;
pub mod config_args;
pub mod env;
pub mod eval;
pub mod fleet;
pub mod ledger;
mod ledger_invalidations;
mod ledger_read;
pub mod nats_args;
pub mod serve;
pub mod train;
