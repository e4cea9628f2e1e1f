"""strata.Client against a real `strata serve`: episodes, act, re-check, report, operator
calls, the gateway's own error messages, a kill -9 mid-load with retries, asyncio."""
import asyncio
import threading
import time
from collections import defaultdict

import pytest

import strata


def test_an_agent_plays_episodes_and_the_operator_releases(served):
    name, token = served.agents[0]
    agent = strata.Client(served.url, token)
    operator = strata.Client(served.url, served.operator)
    episode = agent.start_episode(idempotency_key="ep-1")
    assert isinstance(episode, strata.Episode) and episode.obs_dim == 4
    assert agent.start_episode(idempotency_key="ep-1").episode_id == episode.episode_id
    obs = [0.0, 0.1, 0.0, -0.1]
    action = agent.act(episode.episode_id, obs, env_seq=0, idempotency_key="a-0")
    assert isinstance(action, strata.Action) and action.action[0] in (0.0, 1.0)
    assert agent.act(episode.episode_id, obs, env_seq=0, idempotency_key="a-0") == action
    assert agent.recheck(action.action_id).verdict == "proceed"
    report = agent.report(action.action_id, observation_after=obs, reward=1.0, env_seq=1)
    assert report.status == "stored" and report.sample_id is not None
    again = agent.report(action.action_id, observation_after=obs, reward=1.0, env_seq=1)
    assert again.status == "duplicate" and again.sample_id == report.sample_id
    assert agent.end_episode(episode.episode_id).status == "ended"
    status = operator.status()
    assert isinstance(status, strata.ReleaseStatus) and status.stable == 0
    assert operator.cooldown(0.5).cooldown_secs == 0.5
    assert operator.canary(0.25).canary_fraction == 0.25


def test_refusals_carry_the_gateways_messages(served):
    _, token = served.agents[0]
    agent = strata.Client(served.url, token)
    with pytest.raises(strata.GatewayError) as e:
        agent.act(999_999, [0.0] * 4, env_seq=0)
    assert e.value.status == 404 and "episode 999999" in e.value.message
    episode = agent.start_episode()
    with pytest.raises(strata.GatewayError) as e:
        agent.act(episode.episode_id, [0.0] * 3, env_seq=0)
    assert e.value.status == 400 and "4" in e.value.message, e.value.message
    with pytest.raises(strata.GatewayError) as e:
        agent.promote()
    assert e.value.status == 403, "agents cannot promote"
    with pytest.raises(strata.GatewayError) as e:
        strata.Client(served.url, "not-a-token").status()
    assert e.value.status == 401
    assert not e.value.retryable


def test_byte_arrays_travel_as_their_bytes(served):
    import numpy as np

    _, token = served.agents[0]
    agent = strata.Client(served.url, token)
    episode = agent.start_episode()
    obs = np.array([0, 1, 0, 2], np.uint8)
    body = strata.client._observation(obs)
    assert body == {"dtype": "uint8", "shape": [4], "base64": "AAEAAg=="}
    action = agent.act(episode.episode_id, obs, env_seq=0)
    report = agent.report(action.action_id, observation_after=obs, reward=1.0, env_seq=1)
    assert report.status == "stored"
    with pytest.raises(strata.GatewayError) as e:
        agent.act(episode.episode_id, np.zeros((2, 2), np.uint8), env_seq=1)
    assert e.value.status == 400 and "shape [2, 2]; the policy expects [4]" in e.value.message


EXTERNAL = {"uri": "file:///models/ext.npz", "sha256": "ab" * 32, "size": 10}


@pytest.mark.parametrize("policy", ["strata", "external"])
def test_kill_9_mid_load_loses_no_acknowledged_report_and_stores_none_twice(served, policy):
    """Agents keep playing while the gateway is killed (SIGKILL) and restarted twice; the
    client's retries (same idempotency keys, same action ids) carry them through. With an
    external version, the agents act with their own model and record what they did."""
    version = None
    if policy == "external":
        operator = strata.Client(served.url, served.operator)
        version = operator.publish_external(**EXTERNAL, config_hash="ext-1",
                                            trainer="test").published
        operator.promote(version, force=True)
    stop = threading.Event()
    acked = []  # (ledger idempotency key, sample id)
    lock = threading.Lock()
    errors = []

    def agent(name, token):
        client = strata.Client(served.url, token, retry_for=90)
        step, episode = 0, None
        try:
            while not stop.is_set():
                if episode is None:
                    episode = client.start_episode(idempotency_key=f"{name}-ep-{step}").episode_id
                key = f"{name}-{step}"
                obs = [0.0, 0.1, 0.0, -0.1]
                if version is None:
                    action = client.act(episode, obs, env_seq=step, idempotency_key=key)
                else:
                    action = client.record(episode, obs, {"move": step % 3}, policy_version=version,
                                           config_hash="ext-1", env_seq=step, log_prob=-1.1,
                                           idempotency_key=key)
                done = step % 40 == 39
                report = client.report(action.action_id, observation_after=obs, reward=1.0,
                                       env_seq=step + 1, terminated=done)
                assert report.status in ("stored", "duplicate"), report
                with lock:
                    acked.append((f"{name}/{key}", report.sample_id))
                step += 1
                if done:
                    episode = None
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=agent, args=a) for a in served.agents[:4]]
    for t in threads:
        t.start()

    def wait_for(n):
        deadline = time.monotonic() + 120
        while len(acked) < n:
            assert not errors, errors
            assert time.monotonic() < deadline, f"load stalled at {len(acked)}"
            time.sleep(0.01)

    for round in (1, 2):
        wait_for(300 * round)
        served.kill9()
        served.start()
    wait_for(900)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    served.stop()
    samples = strata.ledger(served.dir).samples().to_pandas()
    stored = defaultdict(list)
    for key, sample in zip(samples["idempotency_key"], samples["sample_id"]):
        stored[key].append(sample)
    lost = [(k, s) for k, s in acked if s not in stored.get(k, [])]
    assert not lost, f"{len(lost)} acknowledged reports missing: {lost[:5]}"
    twice = {k: v for k, v in stored.items() if len(v) > 1}
    assert not twice, f"stored more than once: {list(twice.items())[:5]}"
    assert len(acked) >= 900
    if version is not None:
        ours = samples[samples["policy_version"] == version]
        assert len(ours) >= 900
        assert set(ours["config_hash"]) == {"ext-1"}
        assert ours["action"].str.startswith('{"move":').all()
        assert ours["observation"].map(len).eq(16).all(), "the transition is kept"


def test_the_async_client_drives_agents_from_one_event_loop(served):
    async def play(token, n):
        client = strata.AsyncClient(served.url, token)
        episode = await client.start_episode()
        statuses = []
        for step in range(n):
            action = await client.act(episode.episode_id, [0.0, 0.0, 0.0, 0.0], env_seq=step)
            report = await client.report(action.action_id, observation_after=[0.0] * 4,
                                         reward=1.0, env_seq=step + 1)
            statuses.append(report.status)
        await client.end_episode(episode.episode_id)
        return statuses

    async def main():
        return await asyncio.gather(*(play(t, 10) for _, t in served.agents[:3]))

    results = asyncio.run(main())
    assert [len(r) for r in results] == [10, 10, 10]
    assert all(s == "stored" for r in results for s in r)


def test_closing_an_async_client_closes_its_worker_threads_connections(served):
    async def main():
        async with strata.AsyncClient(served.url, served.agents[0][1]) as client:
            await asyncio.gather(*(client.status() for _ in range(8)))
            conns = set(client.sync._conns)
            assert conns and all(c.sock is not None for c in conns)
        return conns

    conns = asyncio.run(main())
    assert all(c.sock is None for c in conns), "every thread's connection closed"


def test_the_client_speaks_https_to_a_gateway_whose_certificate_a_private_ca_signed(tmp_path):
    import shutil
    import subprocess
    import pytest
    from conftest import Served
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=strata test CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "gw.key", "-out", "gw.csr", "-subj", "/CN=127.0.0.1")
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "gw.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "gw.pem", "-days", "2", "-extfile", "san.cnf")
    served = Served(tmp_path / "gw", extra=["--tls-cert", str(tmp_path / "gw.pem"),
                                            "--tls-key", str(tmp_path / "gw.key")],
                    scheme="https")
    try:
        operator = strata.Client(served.url, served.operator, ca=str(tmp_path / "ca.pem"))
        assert operator.url.startswith("https://") and operator.status().stable == 0
        # The system's roots do not trust the private CA: refused at once, not retried.
        with pytest.raises(strata.GatewayError, match="not trusted") as refused:
            strata.Client(served.url, served.operator).status()
        assert not refused.value.retryable
        with pytest.raises(ValueError, match="https"):
            strata.Client(served.url.replace("https", "http"), served.operator, ca="ca.pem")
    finally:
        served.stop()
