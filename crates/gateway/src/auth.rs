//! Credentials and rate limits: bearer tokens with a role (agent, trainer or operator), read from
//! `tokens.json` in the gateway's directory (created with fresh random tokens on first
//! start, readable by its owner only), and a token bucket per token.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, RequestError};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Start episodes, act, re-check, report, replay, end — on its own episodes only.
    Agent,
    /// Publish, set the canary and cooldown, promote, roll back, invalidate, confirm; and
    /// whatever a trainer may.
    Operator,
    /// A trainer that is not Strata: publish versions (as canary candidates), read the
    /// admitted samples and report what it trained on. Nothing an operator decides.
    Trainer,
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The token's name (an agent's identity).
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// The tokens file: names to secrets (`Debug` shows the names only).
#[derive(Clone, Serialize, Deserialize)]
pub struct TokensFile {
    /// Operator name -> token.
    pub operators: HashMap<String, String>,
    /// Agent name -> token.
    pub agents: HashMap<String, String>,
    /// Trainer name -> token (absent from files written before trainers existed).
    #[serde(default)]
    pub trainers: HashMap<String, String>,
}

impl std::fmt::Debug for TokensFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn names(m: &HashMap<String, String>) -> Vec<&String> {
            let mut v: Vec<&String> = m.keys().collect();
            v.sort();
            v
        }
        f.debug_struct("TokensFile")
            .field("operators", &names(&self.operators))
            .field("agents", &names(&self.agents))
            .field("trainers", &names(&self.trainers))
            .finish_non_exhaustive()
    }
}

impl TokensFile {
    /// Reads `path`, or creates it with one operator and `agents` agent tokens.
    ///
    /// # Errors
    /// The file is unreadable or not a tokens file.
    pub fn load_or_create(path: &Path, agents: usize) -> Result<Self, GatewayError> {
        if path.exists() {
            let text = std::fs::read(path).map_err(|e| GatewayError::io(path, e))?;
            let file: TokensFile = serde_json::from_slice(&text)
                .map_err(|e| GatewayError::Config(format!("{}: {e}", path.display())))?;
            if file.operators.is_empty() {
                return Err(GatewayError::Config(format!(
                    "{}: no operator token",
                    path.display()
                )));
            }
            return Ok(file);
        }
        let file = TokensFile {
            operators: HashMap::from([("operator".to_string(), random_token("op")?)]),
            agents: (0..agents)
                .map(|i| Ok((format!("agent-{i}"), random_token("ag")?)))
                .collect::<Result<_, GatewayError>>()?,
            trainers: HashMap::from([("trainer".to_string(), random_token("tr")?)]),
        };
        let json = serde_json::to_vec_pretty(&file).expect("tokens serialise");
        write_private(path, &json)?;
        Ok(file)
    }

    /// The operator token (the first by name).
    pub fn operator(&self) -> &str {
        let mut names: Vec<&String> = self.operators.keys().collect();
        names.sort();
        &self.operators[names[0]]
    }

    /// Agent tokens sorted by name.
    pub fn agent_tokens(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .agents
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        v.sort_by_key(|(name, _)| natural_key(name));
        v
    }
}

fn natural_key(name: &str) -> (String, u64) {
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let number = digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (
        name.trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string(),
        number,
    )
}

fn random_token(prefix: &str) -> Result<String, GatewayError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| GatewayError::io("/dev/urandom", e))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}-{hex}"))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), GatewayError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| GatewayError::io(path, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| GatewayError::io(path, e))
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token lookup and a token bucket per caller.
pub struct Auth {
    by_token: HashMap<String, Caller>,
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Auth {
    /// Tokens from `file`; each may make `rate` requests per second, `burst` at once.
    pub fn new(file: &TokensFile, rate: f64, burst: f64) -> Self {
        let mut by_token = HashMap::new();
        for (name, token) in &file.operators {
            by_token.insert(
                token.clone(),
                Caller {
                    name: name.clone(),
                    role: Role::Operator,
                },
            );
        }
        for (name, token) in &file.agents {
            by_token.insert(
                token.clone(),
                Caller {
                    name: name.clone(),
                    role: Role::Agent,
                },
            );
        }
        for (name, token) in &file.trainers {
            by_token.insert(
                token.clone(),
                Caller {
                    name: name.clone(),
                    role: Role::Trainer,
                },
            );
        }
        Auth {
            by_token,
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Checks an `Authorization` header value against `role` and the rate limit: agent
    /// endpoints take agent tokens only, operator endpoints operator tokens only, trainer
    /// endpoints trainer or operator tokens.
    ///
    /// # Errors
    /// `Unauthenticated` without a known bearer token, `Forbidden` for the wrong role,
    /// `RateLimited` over the limit.
    pub fn check(&self, header: Option<&str>, role: Role) -> Result<Caller, RequestError> {
        let caller = self.known(header)?;
        let allowed = match role {
            Role::Agent => caller.role == Role::Agent,
            Role::Operator => caller.role == Role::Operator,
            Role::Trainer => matches!(caller.role, Role::Trainer | Role::Operator),
        };
        if !allowed {
            let is = match caller.role {
                Role::Agent => "an agent",
                Role::Operator => "an operator",
                Role::Trainer => "a trainer",
            };
            let needs = match role {
                Role::Agent => "agent endpoints need an agent token",
                Role::Operator => "this needs operator credentials",
                Role::Trainer => "this needs trainer or operator credentials",
            };
            return Err(RequestError::forbidden(format!(
                "{} is {is}: {needs}",
                caller.name
            )));
        }
        self.take(&caller.name)?;
        Ok(caller.clone())
    }

    /// Checks a token of any role and the rate limit (read-only endpoints).
    ///
    /// # Errors
    /// As [`Auth::check`], never `Forbidden`.
    pub fn check_any(&self, header: Option<&str>) -> Result<Caller, RequestError> {
        let caller = self.known(header)?;
        self.take(&caller.name)?;
        Ok(caller.clone())
    }

    fn known(&self, header: Option<&str>) -> Result<&Caller, RequestError> {
        let token = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or_else(|| {
                RequestError::unauthenticated("missing `Authorization: Bearer <token>` header")
            })?;
        self.by_token
            .get(token.trim())
            .ok_or_else(|| RequestError::unauthenticated("unknown token"))
    }

    fn take(&self, name: &str) -> Result<(), RequestError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        let b = buckets.entry(name.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.rate).min(self.burst);
        b.at = now;
        if b.tokens < 1.0 {
            return Err(RequestError::rate_limited(format!(
                "{name} is over its rate limit of {} requests/s",
                self.rate
            )));
        }
        b.tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_rate_limit_are_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let file = TokensFile::load_or_create(&path, 2).unwrap();
        let again = TokensFile::load_or_create(&path, 5).unwrap();
        assert_eq!(again.agents.len(), 2, "an existing file is kept");
        let auth = Auth::new(&file, 1.0, 2.0);
        let agent = format!("Bearer {}", file.agents["agent-0"]);
        let op = format!("Bearer {}", file.operator());
        use crate::error::RequestError as E;
        assert!(matches!(
            auth.check(None, Role::Agent),
            Err(E::Unauthenticated(_))
        ));
        assert!(matches!(
            auth.check(Some("Bearer nope"), Role::Agent),
            Err(E::Unauthenticated(_))
        ));
        assert!(matches!(
            auth.check(Some(&agent), Role::Operator),
            Err(E::Forbidden(_))
        ));
        assert_eq!(
            auth.check(Some(&op), Role::Operator).unwrap().name,
            "operator"
        );
        assert!(auth.check(Some(&agent), Role::Agent).is_ok());
        assert!(auth.check(Some(&agent), Role::Agent).is_ok());
        assert!(
            matches!(
                auth.check(Some(&agent), Role::Agent),
                Err(E::RateLimited(_))
            ),
            "burst of 2 spent"
        );
        let names: Vec<String> = file.agent_tokens().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["agent-0", "agent-1"]);
        // A trainer reaches trainer endpoints, an operator too; an agent does not, and a
        // trainer reaches no operator endpoint.
        let auth = Auth::new(&file, 100.0, 100.0);
        let trainer = format!("Bearer {}", file.trainers["trainer"]);
        assert_eq!(
            auth.check(Some(&trainer), Role::Trainer).unwrap().role,
            Role::Trainer
        );
        assert!(auth.check(Some(&op), Role::Trainer).is_ok());
        assert!(matches!(
            auth.check(Some(&agent), Role::Trainer),
            Err(E::Forbidden(_))
        ));
        assert!(matches!(
            auth.check(Some(&trainer), Role::Operator),
            Err(E::Forbidden(_))
        ));
        assert!(matches!(
            auth.check(Some(&trainer), Role::Agent),
            Err(E::Forbidden(_))
        ));
        assert_eq!(auth.check_any(Some(&trainer)).unwrap().name, "trainer");
    }
}
