//! Watching a training while it runs: the metrics endpoint it serves (`server`) and the
//! terminal monitor (`monitor`: `strata train --monitor`, `strata top`).

pub mod monitor;
pub mod server;
