"""The gateway client: what a deployed agent and an operator call (``strata serve``).

Every call that changes something is safe to retry, and this client retries it on its
own: an act carries an idempotency key (the same answer comes back for the same key), a
report is stored once per action (a repeat is answered ``duplicate``), an episode start
may carry a key too. Retries cover dropped connections, timeouts, 429 and 503, with
backoff, for up to ``retry_for`` seconds (a gateway restarting after a crash included).
Any other refusal raises :class:`GatewayError` with the gateway's own message.

    client = strata.Client("http://127.0.0.1:7878", token)
    episode = client.start_episode()
    action = client.act(episode.episode_id, obs, env_seq=0)
    if client.recheck(action.action_id, target=now).verdict == "proceed":
        ...  # execute action.action
    client.report(action.action_id, observation_after=obs2, reward=1.0)

An agent whose episode is pinned to an external version (``episode.external``: a policy
the gateway does not execute) acts with its own model and records what it did with
:meth:`Client.record` instead of :meth:`Client.act`; re-check and report are the same. A
trainer that is not Strata reads what such agents recorded with :meth:`Client.admitted`,
publishes what it trained with :meth:`Client.publish_external` and says what it trained on
with :meth:`Client.trained`.
"""
from __future__ import annotations

import asyncio
import functools
import http.client
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ._strata import StrataError

if TYPE_CHECKING:
    from typing import Awaitable, Callable, TypeVar

    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
    R = TypeVar("R")


class GatewayError(StrataError):
    """The gateway refused a call: ``status`` is the HTTP status (None when it never
    answered), ``message`` the gateway's reason."""

    def __init__(self, status: Optional[int], message: str, *, final: bool = False):
        super().__init__(f"HTTP {status}: {message}" if status is not None else f"transport: {message}")
        self.status = status
        self.message = message
        # A failure no retry can fix though the gateway never answered (an untrusted
        # certificate).
        self._final = final

    @property
    def retryable(self) -> bool:
        """No answer, rate limited, or the gateway unavailable (not an untrusted
        certificate)."""
        return not self._final and self.status in (None, 429, 503)


def _from(cls, data: Dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Episode:
    """An episode, pinned to one policy version."""

    episode_id: int
    policy_version: int
    config_hash: str
    channel: str
    bucket: str
    trajectory_id: int
    status: str
    steps: int
    pending_action: Optional[int]
    obs_dim: int
    action_dim: int
    external: Optional[Dict[str, Any]] = None
    """For an external version: ``{"artifact": {"uri", "sha256", "size"}, "config_hash",
    "trainer", "metadata"}``, the model to act with (and record the actions of)."""


@dataclass(frozen=True)
class Action:
    """An action to execute; ``action`` is a list (a discrete action's index alone)."""

    action_id: int
    action: List[float]
    policy_version: int
    config_hash: str
    issued_at_ns: int
    side_effect: str
    trajectory_id: int


@dataclass(frozen=True)
class Recorded:
    """A recorded action: re-check and report it by ``action_id`` as an act's.
    ``invalidated`` says why its trajectory was invalidated when it was recorded with a
    version other than the episode's (the episode goes on in a new trajectory)."""

    action_id: int
    policy_version: int
    config_hash: str
    issued_at_ns: int
    side_effect: str
    trajectory_id: int
    invalidated: Optional[str]


@dataclass(frozen=True)
class AdmittedSample:
    """A transition a trainer may train on, its provenance and its admission:
    ``admission`` is ``trained`` (``weight`` 1), ``down_weighted``, or ``needs_kl`` (rule
    ``decay`` on a sample older than the trainer's version: ``weight`` is None, and the
    KL the trainer measures goes into :meth:`Client.trained`)."""

    sample_id: int
    episode_id: int
    trajectory_id: int
    step: int
    policy_version: int
    config_hash: str
    bucket: str
    observation: List[float]
    action: Any
    behaviour_log_prob: Optional[float]
    reward: float
    next_observation: List[float]
    terminated: bool
    truncated: bool
    completed_at_ns: int
    admission: str
    weight: Optional[float]


@dataclass(frozen=True)
class AdmittedPage:
    """A page of admitted samples; pass ``next_cursor`` as ``cursor`` for the next one
    (it is where to go on from in every state, 0 on an empty ledger)."""

    samples: List[AdmittedSample]
    next_cursor: int
    more: bool
    learner_version: int
    rules_version: int
    rules_hash: str
    left_out: int


@dataclass(frozen=True)
class Trained:
    """What a ``trained`` report recorded: samples by decision, decision records written."""

    trained: int
    down_weighted: int
    dropped: int
    decisions: int
    rules_version: int


@dataclass(frozen=True)
class Recheck:
    """``verdict``: ``proceed``, ``abort`` (stale: the trajectory was invalidated) or
    ``needs_human`` (the episode awaits an operator's confirmation)."""

    verdict: str
    reason: str


@dataclass(frozen=True)
class Report:
    """``status``: ``stored``, ``duplicate``, ``timed_out`` or ``status_unknown``."""

    status: str
    sample_id: Optional[int]
    replay: Optional[str]


@dataclass(frozen=True)
class ReleaseStatus:
    """Which versions serve new episodes, the canary, cooldown and the learner."""

    stable: int
    candidate: Optional[int]
    canary_fraction: float
    cooldown_secs: float
    pending: List[Tuple[int, str, float]]
    latest: int
    open_episodes: int
    updates: int
    rules_version: int
    published: Optional[int] = None
    """The version the call published, for a publish."""


def _release_status(data: Dict[str, Any]) -> ReleaseStatus:
    data["pending"] = [tuple(p) for p in data.get("pending", [])]
    return _from(ReleaseStatus, data)


def _floats(values: Sequence[float]) -> List[float]:
    """Plain floats (numpy arrays and scalars included)."""
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def _observation(values: Any) -> Any:
    """An observation as the gateway takes it: a numpy array of bytes or booleans (a
    picture, in any shape the policy accepts) as its bytes in base64, a quarter of the
    size of float32 numbers and a fraction of JSON's; anything else as plain floats."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and dtype.kind in "ub" and dtype.itemsize == 1:
        import base64

        data = values.astype("uint8", copy=False).tobytes(order="C")
        return {"dtype": "uint8", "shape": [int(n) for n in values.shape],
                "base64": base64.b64encode(data).decode("ascii")}
    return _floats(values)


def _json_value(value: Any) -> Any:
    """A value as JSON takes it: numpy arrays and scalars as lists and numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


class Client:
    """A blocking client for one gateway and one token (an agent's, a trainer's or an
    operator's).
    Thread-safe: each thread keeps its own connection alive."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0, retry_for: float = 60.0,
                 ca: Optional[str] = None):
        """``url``: ``http://host:port``, or ``https://host:port`` (the gateway's certificate
        checked against the system's roots, or the CA certificate file ``ca``)."""
        parsed = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"gateway URL {url!r}: expected http://host:port or https://host:port")
        self.url = f"{parsed.scheme}://{parsed.netloc}"
        if ca is not None and parsed.scheme != "https":
            raise ValueError(f"ca= is for https:// gateways, not {url!r}")
        self._tls = ssl.create_default_context(cafile=ca) if parsed.scheme == "https" else None
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._tls else 80)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.timeout, self.retry_for = timeout, retry_for
        self._local = threading.local()
        # Every thread's connection, so that close() reaches them all.
        self._conns: "set[http.client.HTTPConnection]" = set()
        self._conns_lock = threading.Lock()
        self.retries = 0

    # -- transport -------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._tls is not None:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                                   context=self._tls)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
        with self._conns_lock:
            self._conns.add(conn)
        return conn

    def _once(self, method: str, path: str, body: Optional[dict]) -> Any:
        conn = self._connection()
        payload = json.dumps(body).encode() if body is not None else None
        try:
            conn.request(method, path, body=payload, headers=self._headers)
            response = conn.getresponse()
            text = response.read().decode()
        except ssl.SSLCertVerificationError as e:
            conn.close()
            self._local.conn = None
            raise GatewayError(None, f"the gateway's certificate is not trusted ({e.verify_message}): "
                                     "pass ca= the CA certificate that signed it", final=True) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            self._local.conn = None
            raise GatewayError(None, f"{type(e).__name__}: {e}") from e
        if response.status >= 400:
            try:
                message = json.loads(text).get("error", text)
            except ValueError:
                message = text
            raise GatewayError(response.status, message)
        return json.loads(text)

    def call(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        """One API call, retried while the failure is retryable (see the module's docs)."""
        deadline = time.monotonic() + self.retry_for
        wait = 0.005
        while True:
            try:
                return self._once(method, path, body)
            except GatewayError as e:
                if not e.retryable or time.monotonic() + wait > deadline:
                    raise
                self.retries += 1
                time.sleep(wait)
                wait = min(wait * 2, 0.5)

    # -- agents ------------------------------------------------------------------------

    def start_episode(self, idempotency_key: Optional[str] = None) -> Episode:
        """A new episode on the version the gateway serves (stable or canary). With a key,
        starting again with it returns the same episode (a retried start)."""
        key = idempotency_key or uuid.uuid4().hex
        return _from(Episode, self.call("POST", "/v1/episodes", {"idempotency_key": key}))

    def episode(self, episode_id: int) -> Episode:
        """Where an episode stands."""
        return _from(Episode, self.call("GET", f"/v1/episodes/{episode_id}"))

    def act(
        self,
        episode_id: int,
        observation: Any,
        env_seq: int,
        *,
        idempotency_key: Optional[str] = None,
        action_type: Optional[str] = None,
        context: Optional[Dict[str, Any]] = None,
    ) -> Action:
        """The pinned policy's action for `observation` (numbers, or a numpy array: one of
        bytes or booleans, such as a picture in the env's own shape, travels as its bytes).
        `env_seq` is the environment's own clock; `context` (``target``, ``ui_top_level``)
        is what a later re-check compares against. Retries reuse the idempotency key, so
        they get the same action."""
        body: Dict[str, Any] = {
            "observation": _observation(observation),
            "env_seq": int(env_seq),
            "idempotency_key": idempotency_key or uuid.uuid4().hex,
        }
        if action_type is not None:
            body["action_type"] = action_type
        if context is not None:
            body["context"] = context
        return _from(Action, self.call("POST", f"/v1/episodes/{episode_id}/act", body))

    def record(
        self,
        episode_id: int,
        observation: Any,
        action: Any,
        *,
        policy_version: int,
        config_hash: str,
        env_seq: int,
        log_prob: Optional[float] = None,
        probability: Optional[float] = None,
        issued_at_ns: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        action_type: Optional[str] = None,
        context: Optional[Dict[str, Any]] = None,
    ) -> Recorded:
        """Records an action chosen with the agent's own model: `action` is any JSON value
        (numpy arrays and scalars become lists and numbers), `policy_version` and
        `config_hash` the version it actually acted with (another than the episode's
        invalidates its trajectory), `log_prob` (or `probability`) its behaviour
        log-probability for off-policy corrections. Re-check and report it as an act's
        action. Retries reuse the idempotency key, so a record is stored once."""
        body: Dict[str, Any] = {
            "observation": _observation(observation),
            "action": _json_value(action),
            "policy_version": int(policy_version),
            "config_hash": config_hash,
            "env_seq": int(env_seq),
            "idempotency_key": idempotency_key or uuid.uuid4().hex,
        }
        optional = {
            "log_prob": None if log_prob is None else float(log_prob),
            "probability": None if probability is None else float(probability),
            "issued_at_ns": issued_at_ns,
            "action_type": action_type,
            "context": context,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return _from(Recorded, self.call("POST", f"/v1/episodes/{episode_id}/record", body))

    def recheck(
        self,
        action_id: int,
        *,
        target: Optional[Sequence[float]] = None,
        ui_top_level: Optional[Sequence[str]] = None,
    ) -> Recheck:
        """Before executing: is the world still as the action assumed?"""
        body: Dict[str, Any] = {}
        if target is not None:
            body["target"] = _floats(target)
        if ui_top_level is not None:
            body["ui_top_level"] = list(ui_top_level)
        return _from(Recheck, self.call("POST", f"/v1/actions/{action_id}/recheck", body))

    def report(
        self,
        action_id: int,
        *,
        observation_after: Any = None,
        reward: Optional[float] = None,
        terminated: bool = False,
        truncated: bool = False,
        env_seq: Optional[int] = None,
        completed_at_ns: Optional[int] = None,
        during_execution: Optional[Dict[str, Any]] = None,
        episode_return: Optional[float] = None,
        success: Optional[bool] = None,
        outcome: str = "executed",
    ) -> Report:
        """What the action did; durable in the ledger before it is answered. A retry of a
        report whose answer was lost is answered ``duplicate`` and stored once."""
        body: Dict[str, Any] = {"outcome": outcome, "terminated": terminated, "truncated": truncated}
        optional = {
            "observation_after": None if observation_after is None else _observation(observation_after),
            "reward": None if reward is None else float(reward),
            "env_seq": env_seq,
            "completed_at_ns": completed_at_ns,
            "during_execution": during_execution,
            "episode_return": episode_return,
            "success": success,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return _from(Report, self.call("POST", f"/v1/actions/{action_id}/report", body))

    def replay(self, action_id: int, query_result: Optional[str] = None) -> Dict[str, Any]:
        """May a timed-out action run again? For a queryable one, say what asking the world
        found (``not_happened`` or ``happened``)."""
        body = {} if query_result is None else {"query_result": query_result}
        return self.call("POST", f"/v1/actions/{action_id}/replay", body)

    def end_episode(self, episode_id: int) -> Episode:
        """Ends an episode."""
        return _from(Episode, self.call("POST", f"/v1/episodes/{episode_id}/end"))

    def status(self) -> ReleaseStatus:
        """The release state: stable, candidate, canary fraction, cooldown, learner."""
        return _release_status(self.call("GET", "/v1/status"))

    # -- operators ---------------------------------------------------------------------

    def _release(self, path: str, body: Dict[str, Any]) -> ReleaseStatus:
        return _release_status(self.call("POST", path, body))

    def publish(self, checkpoint: str) -> ReleaseStatus:
        """Publishes a checkpoint written by ``strata train`` (same env and network) as the
        canary candidate; ``published`` is its version."""
        return self._release("/v1/operator/publish", {"checkpoint": str(checkpoint)})

    # -- trainers (and operators) ------------------------------------------------------

    def publish_external(
        self,
        uri: str,
        sha256: str,
        size: int,
        *,
        config_hash: str,
        trainer: str,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> ReleaseStatus:
        """Publishes a version the gateway does not execute: agents act with the artifact
        at `uri` (`sha256` and `size` let them check it) and record their actions. It gets
        the next version number (``published``) and becomes the canary candidate after
        the cooldown; promote and roll back treat it as any version. A trainer token may
        call this; promoting stays an operator's."""
        external: Dict[str, Any] = {
            "artifact": {"uri": str(uri), "sha256": sha256, "size": int(size)},
            "config_hash": config_hash,
            "trainer": trainer,
        }
        if metadata is not None:
            external["metadata"] = metadata
        return self._release("/v1/operator/publish", {"external": external})

    def admitted(
        self,
        cursor: Optional[int] = None,
        *,
        limit: Optional[int] = None,
        learner_version: Optional[int] = None,
        bucket: Optional[str] = None,
    ) -> AdmittedPage:
        """A page of the transitions agents recorded that the admission rules in force
        admit for a trainer at `learner_version` (default: the newest version), from
        sample `cursor` on (a previous page's ``next_cursor``; from the first when
        absent): not invalidated, not yet trained on. Strata's own versions' samples are
        its learner's and never appear. A page stops short of a sample whose report is
        still being stored (``more`` is then set), so the cursor never passes a sample
        that becomes durable later."""
        query = {k: v for k, v in (("cursor", cursor), ("limit", limit),
                                   ("learner_version", learner_version), ("bucket", bucket))
                 if v is not None}
        path = "/v1/trainer/admitted"
        if query:
            path += "?" + urllib.parse.urlencode(query)
        data = self.call("GET", path)
        data["samples"] = [_from(AdmittedSample, s) for s in data["samples"]]
        return _from(AdmittedPage, data)

    def trained(
        self,
        version: int,
        base_version: int,
        samples: Sequence[int],
        *,
        kl: Optional[Dict[int, float]] = None,
    ) -> Trained:
        """Says that the update from `base_version` into `version` (published with
        :meth:`publish_external`) consumed `samples`: each gets the decision the rules in
        force make for it, so the ledger's decisions and per-generation metrics stay true.
        Under rule ``decay``, `kl` gives KL(producing || base) by producing version."""
        body: Dict[str, Any] = {
            "version": int(version),
            "base_version": int(base_version),
            "samples": [int(s) for s in samples],
        }
        if kl:
            body["kl"] = {str(int(v)): float(x) for v, x in kl.items()}
        return _from(Trained, self.call("POST", "/v1/trainer/trained", body))

    def canary(self, fraction: float) -> ReleaseStatus:
        """Sends `fraction` of new episodes to the candidate version."""
        return self._release("/v1/operator/canary", {"fraction": float(fraction)})

    def cooldown(self, seconds: float) -> ReleaseStatus:
        """Seconds between publishing a version and new episodes sampling with it."""
        return self._release("/v1/operator/cooldown", {"seconds": float(seconds)})

    def promote(self, version: Optional[int] = None, *, force: bool = False) -> ReleaseStatus:
        """Makes `version` (default: the candidate) stable, with its admission rules."""
        body: Dict[str, Any] = {"force": force}
        if version is not None:
            body["version"] = version
        return self._release("/v1/operator/promote", body)

    def rollback(self, version: int, *, force: bool = False) -> ReleaseStatus:
        """Rolls the stable version (and its admission rules) back to `version`."""
        return self._release("/v1/operator/rollback", {"version": version, "force": force})

    def set_rules(self, rules: Dict[str, Any]) -> Dict[str, Any]:
        """Registers admission rules (``{"rule": "decay", "kl_scale": 0.02}``) for the
        versions published from now on."""
        return self.call("POST", "/v1/operator/rules", rules)

    def invalidate(
        self,
        text: str,
        *,
        trajectory: Optional[int] = None,
        first_sample: Optional[int] = None,
        last_sample: Optional[int] = None,
        reason: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Invalidates a trajectory or a sample range, saying why."""
        body: Dict[str, Any] = {"text": text}
        for key, value in (("trajectory", trajectory), ("first_sample", first_sample),
                           ("last_sample", last_sample), ("reason", reason)):
            if value is not None:
                body[key] = value
        return self.call("POST", "/v1/operator/invalidate", body)

    def confirm(self, episode_id: int) -> Episode:
        """Resumes an episode that awaits a human's confirmation."""
        return _from(Episode, self.call("POST", f"/v1/operator/episodes/{episode_id}/confirm"))

    def close(self) -> None:
        """Closes every connection this client holds, each thread's (an `AsyncClient`'s
        are its worker threads'); a later call opens a new one."""
        with self._conns_lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _awaitable(
    method: "Callable[Concatenate[Client, P], R]",
) -> "Callable[Concatenate[AsyncClient, P], Awaitable[R]]":
    """`method` of the blocking client, run in a worker thread and awaited."""

    async def call(self: "AsyncClient", *args: Any, **kwargs: Any) -> Any:
        run = functools.partial(method, self.sync, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, run)

    return functools.wraps(method)(call)


class AsyncClient:
    """:class:`Client` for asyncio: the same methods, awaited. Each call runs the blocking
    client in a worker thread (each thread keeps its own connection alive), so one event
    loop drives many agents without blocking."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0, retry_for: float = 60.0,
                 ca: Optional[str] = None):
        self.sync = Client(url, token, timeout=timeout, retry_for=retry_for, ca=ca)

    call = _awaitable(Client.call)
    start_episode = _awaitable(Client.start_episode)
    episode = _awaitable(Client.episode)
    act = _awaitable(Client.act)
    record = _awaitable(Client.record)
    recheck = _awaitable(Client.recheck)
    report = _awaitable(Client.report)
    replay = _awaitable(Client.replay)
    end_episode = _awaitable(Client.end_episode)
    status = _awaitable(Client.status)
    publish = _awaitable(Client.publish)
    publish_external = _awaitable(Client.publish_external)
    admitted = _awaitable(Client.admitted)
    trained = _awaitable(Client.trained)
    canary = _awaitable(Client.canary)
    cooldown = _awaitable(Client.cooldown)
    promote = _awaitable(Client.promote)
    rollback = _awaitable(Client.rollback)
    set_rules = _awaitable(Client.set_rules)
    invalidate = _awaitable(Client.invalidate)
    confirm = _awaitable(Client.confirm)

    async def close(self) -> None:
        """Closes every connection the client's worker threads hold."""
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
