//! The words Strata and its Gymnasium worker processes exchange, in one place: the
//! commands posted in the region's header (and as a byte on the socket that wakes a
//! sleeping worker), the one-byte answers, and the description a `--describe` worker
//! sends. The worker program
//! (`python/strata_gym_worker.py`) spells the same bytes in its `COMMAND_*` and `REPLY_*`.

/// A command to a worker process, for all of its envs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Step every env with the actions in the region.
    Step,
    /// Reset every env with the seeds in the region.
    Reset,
    /// Close the envs and exit.
    Quit,
}

impl Command {
    /// Its byte in the header and on the socket.
    pub(crate) fn byte(self) -> u8 {
        match self {
            Command::Step => b'S',
            Command::Reset => b'R',
            Command::Quit => b'Q',
        }
    }
}

/// A worker's one-byte answer on the reply socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Ready (after starting), or the command done.
    Done,
    /// Failed: a length-prefixed traceback follows (after starting), or is in the region's
    /// error area (after a command).
    Failed,
}

impl Reply {
    /// The answer `byte` stands for; `None` for a byte the protocol does not have.
    pub(crate) fn from_byte(byte: u8) -> Option<Reply> {
        match byte {
            b'K' => Some(Reply::Done),
            b'E' => Some(Reply::Failed),
            _ => None,
        }
    }
}

/// What a worker started with `--describe` answers, as one JSON message: the env's layout,
/// the traceback of an env that could not be made, or what the interpreter lacks (said
/// for a person, without a traceback).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Described {
    /// The env was made: how its spaces are flattened.
    Layout(super::GymLayout),
    /// Making it raised: Python's traceback.
    Error(String),
    /// A package or the factory's module is missing: the message for the user.
    Setup(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker program spells the same bytes.
    #[test]
    fn the_worker_program_uses_the_same_bytes() {
        let program = include_str!("../../python/strata_gym_worker.py");
        for (name, byte) in [
            ("COMMAND_STEP", Command::Step.byte()),
            ("COMMAND_RESET", Command::Reset.byte()),
            ("COMMAND_QUIT", Command::Quit.byte()),
            ("REPLY_DONE", b'K'),
            ("REPLY_FAILED", b'E'),
        ] {
            let line = format!("{name} = b\"{}\"", byte as char);
            assert!(program.contains(&line), "the worker lacks `{line}`");
        }
        assert_eq!(Reply::from_byte(b'K'), Some(Reply::Done));
        assert_eq!(Reply::from_byte(b'E'), Some(Reply::Failed));
        assert_eq!(Reply::from_byte(b'x'), None);
    }
}
