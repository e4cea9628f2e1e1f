"""The OpenAPI spec a gateway serves is a contract clients can trust: an independent
property-based tester (Schemathesis) generates requests from `/openapi.json` with an
agent's and an operator's token against a real `strata serve`, and every check passes: no
server error, every status and response body as documented, every schema-violating
request refused, and every schema-valid one accepted. Six operations take data no schema
can describe (a checkpoint directory that exists, a sample range in order, a completion
time after the action's issue, a replay answer that fits the action's side-effect class,
a recorded version with its own config hash, trained samples that exist); their
schema-valid requests are checked for everything but acceptance."""
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

DATA_DEPENDENT = ("^/v1/(operator/(publish|invalidate)|actions/\\{id\\}/(report|replay)"
                  "|episodes/\\{id\\}/record|trainer/trained)$")


def schemathesis() -> str:
    found = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    if not Path(found).exists():
        if os.environ.get("STRATA_REQUIRE_SCHEMATHESIS"):
            pytest.fail("STRATA_REQUIRE_SCHEMATHESIS is set but schemathesis is not installed")
        pytest.skip("schemathesis not installed (python/requirements-dev.txt)")
    return found


def run(tool, workdir, url, token, *args):
    # In a directory of its own: Schemathesis keeps a cache where it runs.
    out = subprocess.run(
        [tool, "run", f"{url}/openapi.json", "-H", f"Authorization: Bearer {token}",
         "--max-examples", "40", "--seed", "1", "--workers", "1", "--warnings", "off",
         "--no-color", *args],
        capture_output=True, text=True, timeout=600, cwd=workdir)
    return out.returncode, out.stdout[-6000:] + out.stderr[-2000:]


@pytest.mark.parametrize("role", ["agent", "operator"])
def test_the_served_spec_holds_under_generated_requests(served, role, tmp_path):
    tool = schemathesis()
    token = served.operator if role == "operator" else served.agents[0][1]
    code, text = run(tool, tmp_path, served.url, token, "--checks", "all",
                     "--exclude-path-regex", DATA_DEPENDENT)
    assert code == 0, text
    code, text = run(tool, tmp_path, served.url, token, "--checks", "all",
                     "--exclude-checks", "positive_data_acceptance",
                     "--include-path-regex", DATA_DEPENDENT)
    assert code == 0, text
    # Still healthy after thousands of hostile requests.
    assert urllib.request.urlopen(f"{served.url}/healthz", timeout=5).read() == b"ok"
    assert served.process.poll() is None
