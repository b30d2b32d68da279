"""The central invariant (06 S4) over generated installs, for every agent of each:

either the rendered fragment validates alone with exactly one agent (and is in export form),
or planning refuses naming a field; and no secret value of the source config appears in the
rendered ``config.toml`` or manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from support.strategies import Install, installs

from bundler.bundle.closure import finish_plan, plan_closure
from bundler.bundle.fragment import check_form
from bundler.bundle.manifest import Contents, Manifest, Provenance, render_config, render_manifest
from bundler.errors import BundlerError, InvalidInput, Refused
from bundler.rules.tomlcompat import loads
from bundler.rules.validate import validate

ROOT = Path("/srv/install")


def _check_install(install: Install) -> None:
    for alias in install.agents:
        try:
            plan = plan_closure(install.config, alias, ROOT)
            carried = [source.alias for source in plan.skill_sources]
            finished = finish_plan(plan, carried, True, [], 1)
        except (InvalidInput, Refused) as refusal:
            _assert_names_a_field(refusal, install)
            continue
        config_bytes = render_config(finished.fragment)
        parsed = loads(config_bytes.decode())
        assert list(parsed["agents"]) == [alias]
        errors, _ = validate(parsed, Path("/elsewhere/empty-install"))
        assert errors == []
        assert check_form(parsed, alias) == []
        manifest = Manifest(
            format_version=1,
            root_agent=alias,
            required_secrets=plan.required_secrets,
            skill_bundles=carried,
            provenance=Provenance("bundler test", "2026-01-01T00:00:00Z"),
            contents=Contents(1, len(config_bytes), "checksums.xxh3", "0" * 32),
            dropped=finished.dropped,
            risk_flags=finished.risk_flags,
        )
        output = config_bytes + render_manifest(manifest)
        text = output.decode()
        for secret in install.secrets:
            assert secret not in text
        assert render_config(finished.fragment) == config_bytes  # deterministic


def _assert_names_a_field(refusal: BundlerError, install: Install) -> None:
    assert refusal.path, refusal.message
    assert refusal.path in refusal.message
    assert "\n" not in refusal.message
    for secret in install.secrets:
        assert secret not in refusal.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs())
def test_every_closure_validates_alone_or_refuses_naming_a_field(install: Install) -> None:
    _check_install(install)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(installs(hostile=True))
def test_hostile_types_and_ciphertext_refuse_naming_a_field_never_crash(install: Install) -> None:
    _check_install(install)


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("BUNDLER_SLOW_SAMPLE", "1500")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(installs(max_agents=12))
def test_every_closure_validates_alone_or_refuses_naming_a_field_at_scale(install: Install) -> None:
    _check_install(install)
