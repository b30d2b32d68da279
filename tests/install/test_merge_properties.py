"""Property tests of the merge planner (Hypothesis): random targets, random fragments.

Whatever the target holds, an import never changes an existing entry, every reference of the
new agent resolves to an entry whose content is the incoming one (or a bound local entry), and
importing the same fragment a second time (``--as``) reuses everything when the first import
namespaced nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.install.merge import (
    ENTRY_KINDS,
    iter_entries,
    plan_merge,
    render_config_text,
    same_content,
)
from bundler.rules import tomlcompat
from bundler.rules.schema import resolve

ALIASES = ["main", "backup", "x", "researcher-main", "researcher-backup"]
FAMILIES = ["anthropic", "openai"]
# secrets drawn from an alphabet used nowhere else, so a leak would be unmistakable
SECRET = st.text(alphabet="ÆØÅæøå", min_size=16, max_size=20)

provider_names = st.builds(
    lambda f, a: f"{f}.{a}", st.sampled_from(FAMILIES), st.sampled_from(ALIASES)
)


@st.composite
def fragments(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    names = draw(st.lists(provider_names, min_size=1, max_size=4, unique=True))
    providers: dict[str, Any] = {}
    for name in names:
        family, alias = name.split(".")
        entry: dict[str, Any] = {"api_key": "", "model": draw(st.sampled_from(["m1", "m2"]))}
        fallback = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
        if fallback:
            entry["fallback"] = fallback
        providers.setdefault(family, {})[alias] = entry
    level = draw(st.sampled_from(["readonly", "supervised"]))
    fragment = {
        "agents": {
            "researcher": {
                "model_provider": names[0],
                "risk_profile": "guarded",
                "delegate_same_risk_profile": False,
            }
        },
        "providers": {"models": providers},
        "risk_profiles": {"guarded": {"level": level}},
    }
    required = sorted(f"providers.models.{name}.api_key" for name in names)
    return fragment, required


@st.composite
def targets(draw: st.DrawFn) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for name in draw(st.lists(provider_names, max_size=4, unique=True)):
        family, alias = name.split(".")
        entry: dict[str, Any] = {"model": draw(st.sampled_from(["m1", "m2"]))}
        if draw(st.booleans()):
            entry["api_key"] = draw(SECRET)
        providers.setdefault(family, {})[alias] = entry
    config: dict[str, Any] = {"providers": {"models": providers}}
    if draw(st.booleans()):
        config["risk_profiles"] = {
            "guarded": {"level": draw(st.sampled_from(["readonly", "supervised"]))}
        }
    return config


def _entry(config: dict[str, Any], kind: str, name: str) -> Any:
    return next((entry for other, entry in iter_entries(config, kind) if other == name), None)


@settings(max_examples=150, deadline=None)
@given(targets(), fragments(), SECRET)
def test_existing_entries_never_change_and_new_refs_resolve(
    target: dict[str, Any], frag: tuple[dict[str, Any], list[str]], secret: str
) -> None:
    fragment, required = frag
    before = copy.deepcopy(target)
    plan = plan_merge(
        target, fragment, required, as_alias="imported", secrets={required[0]: secret}
    )
    assert target == before
    for kind in ENTRY_KINDS:
        for name, entry in iter_entries(before, kind):
            assert _entry(plan.merged, kind, name) == entry
    agent = plan.merged["agents"]["imported"]
    assert _entry(plan.merged, "providers.models", agent["model_provider"]) is not None
    assert _entry(plan.merged, "risk_profiles", agent["risk_profile"]) is not None
    for _, entry in iter_entries(plan.merged, "providers.models"):
        for ref in entry.get("fallback", []):
            assert _entry(plan.merged, "providers.models", ref) is not None
    text, _ = render_config_text(tomli_w.dumps(target), plan)
    assert tomlcompat.loads(text) == plan.merged
    assert secret not in repr(plan.summary()) + repr(plan.secrets_filled) + repr(plan.renamed)


@settings(max_examples=150, deadline=None)
@given(targets(), fragments())
def test_second_import_reuses_what_the_first_added(
    target: dict[str, Any], frag: tuple[dict[str, Any], list[str]]
) -> None:
    fragment, required = frag
    first = plan_merge(target, fragment, required, as_alias="one")
    second = plan_merge(first.merged, fragment, required, as_alias="two")
    # what the first had to namespace, the second must too; an entry the first added that
    # references a namespaced one is namespaced again (its rewritten reference differs)
    assert set(second.renamed) >= set(first.renamed)
    if not first.renamed:
        assert second.renamed == {} and second.added == ["agents.two"]
    for path in second.reused:
        segments = path.split(".")
        node = resolve(segments)[1]
        kind = "providers.models" if segments[0] == "providers" else segments[0]
        name = ".".join(segments[2:]) if kind == "providers.models" else segments[1]
        incoming = _entry(fragment, kind, name)
        assert same_content(incoming, _entry(second.merged, kind, name), node, [["api_key"]])
