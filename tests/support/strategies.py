"""Hypothesis strategies for whole installs: configs with many agents and everything they reference.

``installs()`` draws a config dict as ``config.toml`` would load: agents referencing providers
(with random fallback graphs, dangling and unknown-family edges), risk and runtime profiles,
skill/knowledge/MCP bundles, MCP servers (duplicated names, impostors), opaque channels, unknown
keys, and sometimes dangling references. Every secret is 16 or more characters drawn from
:data:`SECRET_ALPHABET`, which no other generated string uses, so a test can look for any secret
value by substring anywhere (``Install.secrets``). Shared with the export and import tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

# upper-case letters appear in no alias, family, key or ordinary value drawn here
SECRET_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ"
MODEL_FAMILIES = ("openai", "anthropic", "groq", "mistral", "gemini_cli", "custom", "azure")
TTS_FAMILIES = ("openai", "elevenlabs", "piper")
TRANSCRIPTION_FAMILIES = ("openai", "local_whisper", "deepgram")
UNKNOWN_FAMILY = "skynet"

secret_values = st.text(alphabet=SECRET_ALPHABET, min_size=16, max_size=40)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
odd_keys = st.sampled_from(["x-org.id", "plain", "with space", "x_trace"])


@dataclass
class Install:
    """A drawn config and every secret value it holds (to check that none leaks)."""

    config: dict[str, Any]
    secrets: set[str] = field(default_factory=set)

    @property
    def agents(self) -> list[str]:
        """The aliases of the drawn agents."""
        return list(self.config.get("agents", {}))


class _Draw:
    """Helpers bound to one ``draw`` and one set of collected secrets."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.secrets: set[str] = set()

    def secret(self, allow_empty: bool = True) -> str:
        choice = self.draw(
            st.sampled_from(["value", "value", "empty", "cipher"] if allow_empty else ["value"])
        )
        if choice == "empty":
            return ""
        value = self.draw(secret_values)
        self.secrets.add(value)
        return ("enc2:" + value) if choice == "cipher" else value

    def maybe(self, probability_true: float = 0.5) -> bool:
        return self.draw(st.floats(0, 1)) < probability_true

    def pick(self, options: list[str], dangling: str | None = None) -> str:
        pool = [*options, *([dangling] if dangling else [])]
        return self.draw(st.sampled_from(pool)) if pool else (dangling or "")


def _providers(d: _Draw, count: int) -> tuple[dict[str, Any], list[str]]:
    refs = [f"{d.draw(st.sampled_from(MODEL_FAMILIES))}.p{i}" for i in range(count)]
    models: dict[str, Any] = {}
    for ref in refs:
        family, alias = ref.split(".")
        entry: dict[str, Any] = {"api_key": d.secret(), "model": d.draw(words)}
        edges = d.draw(
            st.lists(
                st.sampled_from([*refs, "openai.gone", f"{UNKNOWN_FAMILY}.x", "bare"]), max_size=3
            )
        )
        if edges:
            entry["fallback"] = edges
        if d.maybe(0.3):
            entry["extra_headers"] = {d.draw(odd_keys): d.secret(allow_empty=False)}
        if d.maybe(0.2):
            entry["uri"] = f"https://{d.draw(words)}.example/v1"
        if family == "gemini_cli" and d.maybe(0.5):
            entry["binary_path"] = f"/usr/bin/{d.draw(words)}"
        if d.maybe(0.1):
            entry["vendor_extension"] = d.draw(words)
        if d.maybe(0.1):
            entry["requires_openai_auth"] = True
        models.setdefault(family, {})[alias] = entry
    return models, refs


def _risk_profile(d: _Draw) -> dict[str, Any]:
    profile: dict[str, Any] = {"level": d.draw(st.sampled_from(["readonly", "supervised", "full"]))}
    if d.maybe(0.3):
        profile["workspace_only"] = False
    if d.maybe(0.3):
        profile["allowed_commands"] = d.draw(st.lists(words, min_size=1, max_size=3))
    if d.maybe(0.2):
        profile["shell_env_passthrough"] = ["path", "home_dir"]
    if d.maybe(0.2):
        profile["approval_route"] = {"approver_channel": "telegram.main", "timeout_secs": 30}
    if d.maybe(0.2):
        profile["delegation_policy"] = {"mode": "allow"}
    if d.maybe(0.2):
        profile["sandbox_enabled"] = False
    return profile


def _servers(d: _Draw, names: list[str]) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = []
    for name in names:
        if d.maybe(0.3):
            server: dict[str, Any] = {
                "name": name,
                "transport": "http",
                "url": f"https://{name}.example/mcp",
            }
            if d.maybe(0.5):
                server["headers"] = {"authorization": d.secret(allow_empty=False)}
        else:
            server = {
                "name": name,
                "command": d.draw(words),
                "args": d.draw(st.lists(words, max_size=2)),
            }
            if d.maybe(0.6):
                server["env"] = {"api_token": d.secret(allow_empty=False)}
        if d.maybe(0.1):
            server["pinned_resources"] = [f"file:///{d.draw(words)}"]
        servers.append(server)
    return servers


def _inject_hostile(d: _Draw, config: dict[str, Any]) -> None:
    """Wrong types and escaped ciphertext where a hand-edited or hostile config may have them."""
    agents = list(config["agents"].values())
    victim = d.draw(st.sampled_from(agents))
    damage = d.draw(
        st.sampled_from(
            [
                "model_type",
                "bundle_string",
                "fallback_string",
                "profile_string",
                "server_junk",
                "server_name_list",
                "ciphertext",
                "workspace_string",
                "ciphertext_list",
            ]
        )
    )
    models = config["providers"]["models"]
    first_family = next(iter(models))
    first_provider = next(iter(models[first_family].values()))
    if damage == "model_type":
        victim["model_provider"] = 5
    elif damage == "bundle_string":
        victim["mcp_bundles"] = "m0"
    elif damage == "fallback_string":
        first_provider["fallback"] = "openai.p0"
    elif damage == "profile_string":
        config["risk_profiles"][
            victim["risk_profile"] if victim["risk_profile"] in config["risk_profiles"] else "r0"
        ] = "strict"
    elif damage == "server_junk":
        config["mcp"]["servers"].insert(0, "not a table")
    elif damage == "server_name_list":
        config["mcp"]["servers"].insert(0, {"name": ["github"], "command": "x"})
    elif damage == "ciphertext":
        first_provider["model"] = "enc:" + d.draw(words)
    elif damage == "workspace_string":
        victim["workspace"] = "/srv/ws"
    else:
        victim["skill_bundles"] = ["enc2:" + d.draw(words)]


@st.composite
def installs(draw: st.DrawFn, max_agents: int = 6, hostile: bool = False) -> Install:
    """A whole install's config with 1..``max_agents`` agents and the secrets it holds.

    With ``hostile``, one wrong type or escaped ciphertext is injected somewhere.
    """
    d = _Draw(draw)
    models, model_refs = _providers(d, draw(st.integers(1, 8)))
    config: dict[str, Any] = {"providers": {"models": models}}
    tts_refs = [
        f"{draw(st.sampled_from(TTS_FAMILIES))}.t{i}" for i in range(draw(st.integers(0, 2)))
    ]
    for ref in tts_refs:
        family, alias = ref.split(".")
        config["providers"].setdefault("tts", {}).setdefault(family, {})[alias] = {
            "api_key": d.secret()
        }
    stt_refs = [
        f"{draw(st.sampled_from(TRANSCRIPTION_FAMILIES))}.s{i}"
        for i in range(draw(st.integers(0, 2)))
    ]
    for ref in stt_refs:
        family, alias = ref.split(".")
        entry: dict[str, Any] = {"api_key": d.secret()}
        if family == "local_whisper":
            entry["bearer_token"] = d.secret()
        config["providers"].setdefault("transcription", {}).setdefault(family, {})[alias] = entry
    risk = {f"r{i}": _risk_profile(d) for i in range(draw(st.integers(1, 3)))}
    config["risk_profiles"] = risk
    runtime: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 3))):
        profile: dict[str, Any] = {"max_tool_iterations": draw(st.integers(0, 30))}
        if d.maybe(0.4):
            profile["context_compression"] = {"summary_provider": d.pick(model_refs, "openai.gone")}
        runtime[f"rt{i}"] = profile
    config["runtime_profiles"] = runtime
    skill_aliases = [
        draw(st.sampled_from(["tools", "con", "web", "docs"])) + str(i) if i else "con"
        for i in range(draw(st.integers(0, 3)))
    ]
    config["skill_bundles"] = {
        alias: (
            {"directory": draw(st.sampled_from(["shared/skills/x", "/opt/skills", "../outside"]))}
            if d.maybe(0.4)
            else {}
        )
        for alias in skill_aliases
    }
    config["knowledge_bundles"] = {"kb": {"sources": ["https://example.org/a", "/home/papers"]}}
    server_names = draw(
        st.lists(st.sampled_from(["github", "shell", "web", "db", "search"]), max_size=6)
    )
    config["mcp"] = {"servers": _servers(d, server_names)}
    pool = ["github", "shell", "web", "db", "search", "ghost"]
    config["mcp_bundles"] = {
        f"m{i}": {
            "servers": draw(st.lists(st.sampled_from(pool), max_size=4)),
            **(
                {"exclude": draw(st.lists(st.sampled_from(pool), max_size=2))}
                if d.maybe(0.4)
                else {}
            ),
        }
        for i in range(draw(st.integers(0, 3)))
    }
    config["channels"] = {"telegram": {"main": {"bot_token": d.secret(allow_empty=False)}}}
    agents: dict[str, Any] = {}
    for i in range(draw(st.integers(1, max_agents))):
        agent: dict[str, Any] = {
            "model_provider": d.pick(model_refs, f"{UNKNOWN_FAMILY}.x" if d.maybe(0.05) else None),
            "risk_profile": d.pick(list(risk), "ghost" if d.maybe(0.05) else None),
        }
        if runtime and d.maybe(0.6):
            agent["runtime_profile"] = d.pick(list(runtime))
        if d.maybe(0.3):
            agent["summary_provider"] = d.pick(model_refs)
        if tts_refs and d.maybe(0.3):
            agent["tts_provider"] = d.pick(tts_refs)
        if stt_refs and d.maybe(0.3):
            agent["transcription_provider"] = d.pick(stt_refs)
        if config["skill_bundles"] and d.maybe(0.5):
            agent["skill_bundles"] = draw(
                st.lists(st.sampled_from(list(config["skill_bundles"])), max_size=3)
            )
        if config["mcp_bundles"] and d.maybe(0.6):
            agent["mcp_bundles"] = draw(
                st.lists(st.sampled_from(list(config["mcp_bundles"])), max_size=3)
            )
        if d.maybe(0.3):
            agent["knowledge_bundles"] = ["kb"]
        if d.maybe(0.3):
            agent["channels"] = ["telegram.main"]
        if d.maybe(0.3):
            agent["workspace"] = {
                "path": f"/srv/{d.draw(words)}",
                "unrestricted_filesystem": d.maybe(0.5),
            }
        if d.maybe(0.3):
            agent["identity"] = {
                "format": "aieos",
                "aieos_path": d.pick(["persona/aieos.json", "/etc/x", "memory/a.json", "../x"]),
            }
        if d.maybe(0.2):
            agent["delegates"] = [f"a{j}" for j in range(i)]
        if d.maybe(0.1):
            agent["nickname"] = d.draw(words)
        agents[f"a{i}"] = agent
    config["agents"] = agents
    if hostile:
        _inject_hostile(d, config)
    return Install(config, d.secrets)
