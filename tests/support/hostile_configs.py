"""A generator of hostile ``config.toml`` files (06 S3): each breaks one rule of 01 §5.

Every case is a valid base config with one mutation, plus the config path the error must name
and its kind. Offending string values carry :data:`CANARY`, so a test can prove no message
quotes the value it rejects; the base carries secrets (:data:`BASE_SECRETS`) that must never be
printed either.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import tomli_w

CANARY = "sk-FAKE-CANARY-q7Zx9w2Lm4Np8Rt6"

BASE_SECRETS = (
    "sk-FAKE-base-anthropic-Kp3Vw8Qz",
    "sk-FAKE-base-openai-Hy6Tr2Nd5Lm",
    "ghp_FAKEbaseGithubToken44Xc",
    "Bearer sk-FAKE-base-web-Jk9Pq1",
    "sk-FAKE-base-whisper-Vb7Cx3Zs",
)

Config = dict[str, Any]


def base_config() -> Config:
    """A valid install config touching every section, holding :data:`BASE_SECRETS`."""
    return {
        "agents": {
            "researcher": {
                "model_provider": "anthropic.main",
                "summary_provider": "openai.backup",
                "transcription_provider": "local_whisper.desk",
                "risk_profile": "careful",
                "runtime_profile": "rt",
                "skill_bundles": ["sb"],
                "knowledge_bundles": ["kb"],
                "mcp_bundles": ["mb"],
                "channels": ["slack.team"],
                "cron_jobs": ["daily"],
                "delegates": ["writer"],
                "workspace": {"access": {"writer": "read"}, "read_memory_from": ["writer"]},
            },
            "writer": {"model_provider": "openai.backup", "risk_profile": "careful"},
        },
        "providers": {
            "models": {
                "anthropic": {"main": {"api_key": BASE_SECRETS[0], "fallback": ["openai.backup"]}},
                "openai": {
                    "backup": {"api_key": BASE_SECRETS[1], "uri": "https://api.example.com/v1"}
                },
            },
            "transcription": {
                # ZeroClaw has no default for a local whisper's uri: it is required
                "local_whisper": {
                    "desk": {"uri": "http://127.0.0.1:9000", "bearer_token": BASE_SECRETS[4]}
                }
            },
        },
        "risk_profiles": {"careful": {"level": "supervised"}},
        "runtime_profiles": {"rt": {"context_compression": {"summary_provider": "openai.backup"}}},
        "skill_bundles": {"sb": {}},
        "knowledge_bundles": {"kb": {"sources": ["notes"]}},
        "mcp_bundles": {"mb": {"servers": ["gh", "web"]}},
        "mcp": {
            "servers": [
                {"name": "gh", "command": "gh-mcp", "env": {"GITHUB_TOKEN": BASE_SECRETS[2]}},
                {
                    "name": "web",
                    "transport": "http",
                    "url": "https://mcp.example.com",
                    "headers": {"Authorization": BASE_SECRETS[3]},
                },
            ]
        },
        "channels": {"slack": {"team": {"channel": "#x"}}},
        "cron": {"daily": {"schedule": "0 8 * * *"}},
    }


@dataclass(frozen=True)
class HostileConfig:
    """One hostile config: its TOML text, the config path the error names, and the kind."""

    name: str
    text: str
    path: str
    kind: str


def _researcher(config: Config) -> Config:
    agent: Config = config["agents"]["researcher"]
    return agent


def _server(config: Config, name: str) -> Config:
    for entry in config["mcp"]["servers"]:
        if entry["name"] == name:
            found: Config = entry
            return found
    raise KeyError(name)


def _del(config: Config, *keys: str) -> None:
    target: Any = config
    for key in keys[:-1]:
        target = target[key]
    del target[keys[-1]]


Mutation = Callable[[Config], None]

# (name, mutation, expected path, expected kind)
_CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "model_provider_wrong_type",
        lambda c: _researcher(c).update(model_provider=42),
        "agents.researcher.model_provider",
        "invalid_value",
    ),
    (
        "model_provider_is_a_date",
        lambda c: _researcher(c).update(model_provider=datetime.date(2024, 1, 1)),
        "agents.researcher.model_provider",
        "invalid_value",
    ),
    (
        "model_provider_missing",
        lambda c: _del(c, "agents", "researcher", "model_provider"),
        "agents.researcher.model_provider",
        "required_field_empty",
    ),
    (
        "model_provider_empty",
        lambda c: _researcher(c).update(model_provider=""),
        "agents.researcher.model_provider",
        "required_field_empty",
    ),
    (
        "model_provider_not_dotted",
        lambda c: _researcher(c).update(model_provider=CANARY.replace("-", "_")),
        "agents.researcher.model_provider",
        "invalid_format",
    ),
    (
        "model_provider_unknown_family",
        lambda c: _researcher(c).update(model_provider="skynet.main"),
        "agents.researcher.model_provider",
        "invalid_value",
    ),
    (
        "model_provider_dangling",
        lambda c: _researcher(c).update(model_provider="anthropic.gone"),
        "agents.researcher.model_provider",
        "dangling_reference",
    ),
    (
        "tts_provider_dangling",
        lambda c: _researcher(c).update(tts_provider="openai.voice"),
        "agents.researcher.tts_provider",
        "dangling_reference",
    ),
    (
        "transcription_provider_wrong_category",
        lambda c: _researcher(c).update(transcription_provider="anthropic.main"),
        "agents.researcher.transcription_provider",
        "invalid_value",
    ),
    (
        "classifier_provider_three_parts",
        lambda c: _researcher(c).update(classifier_provider="openai.backup.extra"),
        "agents.researcher.classifier_provider",
        "invalid_format",
    ),
    (
        "risk_profile_dangling",
        lambda c: _researcher(c).update(risk_profile="reckless"),
        "agents.researcher.risk_profile",
        "dangling_reference",
    ),
    (
        "risk_profile_missing_when_enabled",
        lambda c: _del(c, "agents", "writer", "risk_profile"),
        "agents.writer.risk_profile",
        "required_field_empty",
    ),
    (
        "runtime_profile_dangling",
        lambda c: _researcher(c).update(runtime_profile="fast"),
        "agents.researcher.runtime_profile",
        "dangling_reference",
    ),
    (
        "skill_bundle_dangling",
        lambda c: _researcher(c).update(skill_bundles=["sb", "nope"]),
        "agents.researcher.skill_bundles[1]",
        "dangling_reference",
    ),
    (
        "knowledge_bundle_dangling",
        lambda c: _researcher(c).update(knowledge_bundles=["gone"]),
        "agents.researcher.knowledge_bundles[0]",
        "dangling_reference",
    ),
    (
        "mcp_bundle_dangling",
        lambda c: _researcher(c).update(mcp_bundles=["mb", "ghost"]),
        "agents.researcher.mcp_bundles[1]",
        "dangling_reference",
    ),
    (
        "cron_job_dangling",
        lambda c: _researcher(c).update(cron_jobs=["weekly"]),
        "agents.researcher.cron_jobs[0]",
        "dangling_reference",
    ),
    (
        "channel_not_dotted",
        lambda c: _researcher(c).update(channels=["slack"]),
        "agents.researcher.channels[0]",
        "invalid_format",
    ),
    (
        "channel_dangling",
        lambda c: _researcher(c).update(channels=["slack.other"]),
        "agents.researcher.channels[0]",
        "dangling_reference",
    ),
    (
        "delegate_self",
        lambda c: _researcher(c).update(delegates=["researcher"]),
        "agents.researcher.delegates[0]",
        "invalid_value",
    ),
    (
        "delegate_unknown",
        lambda c: _researcher(c).update(delegates=[{"agent": "ghost"}]),
        "agents.researcher.delegates[0]",
        "dangling_reference",
    ),
    (
        "delegate_repeated",
        lambda c: _researcher(c).update(delegates=["writer", {"agent": "writer"}]),
        "agents.researcher.delegates[1]",
        "invalid_value",
    ),
    (
        "delegate_wrong_type",
        lambda c: _researcher(c).update(delegates=[7]),
        "agents.researcher.delegates[0]",
        "invalid_value",
    ),
    (
        "access_unknown_agent",
        lambda c: _researcher(c)["workspace"].update(access={"ghost": "read"}),
        "agents.researcher.workspace.access.ghost",
        "dangling_reference",
    ),
    (
        "access_bad_mode",
        lambda c: _researcher(c)["workspace"].update(access={"writer": CANARY}),
        "agents.researcher.workspace.access.writer",
        "invalid_value",
    ),
    (
        "read_memory_from_self",
        lambda c: _researcher(c)["workspace"].update(read_memory_from=["researcher"]),
        "agents.researcher.workspace.read_memory_from[0]",
        "invalid_value",
    ),
    (
        "read_memory_from_other_backend",
        lambda c: c["agents"]["writer"].update(memory={"backend": "postgres"}),
        "agents.researcher.workspace.read_memory_from[0]",
        "invalid_value",
    ),
    (
        "read_memory_restricted_markdown",
        lambda c: (
            _researcher(c).update(memory={"backend": "markdown"}),
            c["agents"]["writer"].update(memory={"backend": "markdown"}),
            _researcher(c)["workspace"].update(
                read_memory_from=[{"agent": "writer", "categories": ["x"]}]
            ),
        ),
        "agents.researcher.workspace.read_memory_from[0]",
        "invalid_value",
    ),
    (
        "memory_backend_bad_enum",
        lambda c: _researcher(c).update(memory={"backend": CANARY}),
        "agents.researcher.memory.backend",
        "invalid_value",
    ),
    (
        "enabled_not_bool",
        lambda c: _researcher(c).update(enabled="yes"),
        "agents.researcher.enabled",
        "invalid_value",
    ),
    (
        "unknown_model_family",
        lambda c: c["providers"]["models"].update(skynet={"x": {}}),
        "providers.models.skynet",
        "invalid_value",
    ),
    (
        "unknown_tts_family",
        lambda c: c["providers"].update(tts={"robotalk": {}}),
        "providers.tts.robotalk",
        "invalid_value",
    ),
    (
        "provider_uri_not_http",
        lambda c: c["providers"]["models"]["openai"]["backup"].update(uri="ftp://" + CANARY),
        "providers.models.openai.backup.uri",
        "invalid_format",
    ),
    (
        "temperature_out_of_range",
        lambda c: c["providers"]["models"]["openai"]["backup"].update(temperature=3.5),
        "providers.models.openai.backup.temperature",
        "invalid_value",
    ),
    (
        "timeout_zero",
        lambda c: c["providers"]["models"]["openai"]["backup"].update(timeout_secs=0),
        "providers.models.openai.backup.timeout_secs",
        "invalid_value",
    ),
    (
        "api_key_wrong_type",
        lambda c: c["providers"]["models"]["anthropic"]["main"].update(api_key=[CANARY]),
        "providers.models.anthropic.main.api_key",
        "invalid_value",
    ),
    (
        "extra_header_not_string",
        lambda c: c["providers"]["models"]["openai"]["backup"].update(
            extra_headers={"X-Org.Id": 5}
        ),
        "providers.models.openai.backup.extra_headers.X-Org.Id",
        "invalid_value",
    ),
    (
        "tls_ca_cert_relative",
        lambda c: c["providers"]["models"]["openai"]["backup"].update(
            tls_ca_cert_path="certs/ca.pem"
        ),
        "providers.models.openai.backup.tls_ca_cert_path",
        "invalid_format",
    ),
    (
        "risk_level_bad_enum",
        lambda c: c["risk_profiles"]["careful"].update(level="godmode"),
        "risk_profiles.careful.level",
        "invalid_value",
    ),
    (
        "invalid_env_var_name",
        lambda c: c["risk_profiles"]["careful"].update(shell_env_passthrough=["PATH", "BAD-NAME"]),
        "risk_profiles.careful.shell_env_passthrough[1]",
        "invalid_format",
    ),
    (
        "allowed_root_relative",
        lambda c: c["risk_profiles"]["careful"].update(allowed_roots=["srv"]),
        "risk_profiles.careful.allowed_roots[0]",
        "invalid_format",
    ),
    (
        "runtime_summary_provider_dangling",
        lambda c: c["runtime_profiles"]["rt"]["context_compression"].update(
            summary_provider="groq.gone"
        ),
        "runtime_profiles.rt.context_compression.summary_provider",
        "dangling_reference",
    ),
    (
        "threshold_ratio_above_one",
        lambda c: c["runtime_profiles"]["rt"]["context_compression"].update(threshold_ratio=1.5),
        "runtime_profiles.rt.context_compression.threshold_ratio",
        "invalid_value",
    ),
    (
        "skill_folder_escapes_shared",
        lambda c: c["skill_bundles"]["sb"].update(directory="shared/../../etc"),
        "skill_bundles.sb.directory",
        "invalid_value",
    ),
    (
        "skill_folder_absolute_outside",
        lambda c: c["skill_bundles"]["sb"].update(directory="/etc"),
        "skill_bundles.sb.directory",
        "invalid_value",
    ),
    (
        "skill_folder_is_shared_itself",
        lambda c: c["skill_bundles"]["sb"].update(directory="shared/skills/.."),
        "skill_bundles.sb.directory",
        "invalid_value",
    ),
    (
        "skill_folders_collide",
        lambda c: c["skill_bundles"].update(other={"directory": "shared/x/../skills/./sb"}),
        "skill_bundles.other.directory",
        "invalid_value",
    ),
    (
        "mcp_server_without_name",
        lambda c: c["mcp"]["servers"].append({"command": "x"}),
        "mcp.servers[2].name",
        "required_field_empty",
    ),
    (
        "mcp_server_empty_name",
        lambda c: c["mcp"]["servers"].append({"name": "", "command": "x"}),
        "mcp.servers[2].name",
        "required_field_empty",
    ),
    (
        "mcp_names_differ_in_case",
        lambda c: c["mcp"]["servers"].append({"name": "GH", "command": "x"}),
        "mcp.servers.GH.name",
        "invalid_value",
    ),
    (
        "mcp_stdio_without_command",
        lambda c: _server(c, "gh").pop("command"),
        "mcp.servers.gh.command",
        "required_field_empty",
    ),
    (
        "mcp_http_without_url",
        lambda c: _server(c, "web").pop("url"),
        "mcp.servers.web.url",
        "required_field_empty",
    ),
    (
        "mcp_http_url_without_host",
        lambda c: _server(c, "web").update(url="https:///" + CANARY),
        "mcp.servers.web.url",
        "invalid_format",
    ),
    (
        "mcp_url_with_space",
        lambda c: _server(c, "web").update(url="https://exa mple.com/" + CANARY),
        "mcp.servers.web.url",
        "invalid_format",
    ),
    (
        "mcp_ca_cert_without_https",
        lambda c: _server(c, "web").update(
            url="http://mcp.example.com", tls_ca_cert_path="/etc/ssl/" + CANARY
        ),
        "mcp.servers.web.tls_ca_cert_path",
        "invalid_value",
    ),
    (
        "mcp_bad_transport",
        lambda c: _server(c, "web").update(transport="carrier-pigeon"),
        "mcp.servers.web.transport",
        "invalid_value",
    ),
    (
        "mcp_tool_timeout_too_long",
        lambda c: _server(c, "gh").update(tool_timeout_secs=601),
        "mcp.servers.gh.tool_timeout_secs",
        "invalid_value",
    ),
    (
        "mcp_env_value_not_string",
        lambda c: _server(c, "gh").update(env={"GITHUB_TOKEN": 123}),
        "mcp.servers.gh.env.GITHUB_TOKEN",
        "invalid_value",
    ),
    (
        "agent_alias_with_dot",
        lambda c: c["agents"].update({"re.searcher": {"model_provider": "x.y"}}),
        'agents."re.searcher"',
        "invalid_format",
    ),
    ("agents_not_a_table", lambda c: c.update(agents=5), "agents", "invalid_value"),
    (
        "agent_not_a_table",
        lambda c: c["agents"].update(writer=[CANARY]),
        "agents.writer",
        "invalid_value",
    ),
    # wrongly typed containers: every reader of a target config must refuse them
    ("mcp_not_a_table", lambda c: c.update(mcp=[]), "mcp", "invalid_value"),
    (
        "skill_bundles_not_a_table",
        lambda c: c.update(skill_bundles=[]),
        "skill_bundles",
        "invalid_value",
    ),
    ("providers_not_a_table", lambda c: c.update(providers=CANARY), "providers", "invalid_value"),
    (
        "provider_models_not_a_table",
        lambda c: c["providers"].update(models=3),
        "providers.models",
        "invalid_value",
    ),
    (
        "provider_family_not_a_table",
        lambda c: c["providers"]["models"].update(anthropic=5),
        "providers.models.anthropic",
        "invalid_value",
    ),
    (
        "provider_entry_not_a_table",
        lambda c: c["providers"]["models"]["openai"].update(backup=[CANARY]),
        "providers.models.openai.backup",
        "invalid_value",
    ),
    (
        "provider_tts_not_a_table",
        lambda c: c["providers"].update(tts=[]),
        "providers.tts",
        "invalid_value",
    ),
    (
        "risk_profiles_not_a_table",
        lambda c: c.update(risk_profiles=[]),
        "risk_profiles",
        "invalid_value",
    ),
    (
        "risk_profile_not_a_table",
        lambda c: c["risk_profiles"].update(careful=[1]),
        "risk_profiles.careful",
        "invalid_value",
    ),
    (
        "runtime_profiles_not_a_table",
        lambda c: c.update(runtime_profiles=[1]),
        "runtime_profiles",
        "invalid_value",
    ),
    ("mcp_bundles_not_a_table", lambda c: c.update(mcp_bundles=1), "mcp_bundles", "invalid_value"),
    (
        "knowledge_bundles_not_a_table",
        lambda c: c.update(knowledge_bundles=CANARY),
        "knowledge_bundles",
        "invalid_value",
    ),
    (
        "skill_bundle_not_a_table",
        lambda c: c["skill_bundles"].update(sb=CANARY),
        "skill_bundles.sb",
        "invalid_value",
    ),
    (
        "mcp_servers_not_an_array",
        lambda c: c["mcp"].update(servers=3),
        "mcp.servers",
        "invalid_value",
    ),
    (
        "mcp_server_not_a_table",
        lambda c: c["mcp"]["servers"].append(5),
        "mcp.servers[2]",
        "invalid_value",
    ),
    (
        "agent_skill_bundles_not_a_list",
        lambda c: _researcher(c).update(skill_bundles="sb"),
        "agents.researcher.skill_bundles",
        "invalid_value",
    ),
]

# the cases whose only fault is a container of the wrong type (the shape every reader walks)
WRONGLY_TYPED = tuple(
    name for name, *_ in _CASES if name.endswith(("_not_a_table", "_not_an_array", "_not_a_list"))
)

# cases that are not one mutation of the base: raw TOML text
_RAW_CASES: list[HostileConfig] = [
    HostileConfig(
        "toml_syntax_error",
        f'[agents.researcher]\nmodel_provider = "{CANARY}\n',
        "config.toml",
        "",
    ),
    HostileConfig(
        "toml_duplicate_key",
        f'[agents.a]\nmodel_provider = "x.y"\nmodel_provider = "{CANARY}"\n',
        "config.toml",
        "",
    ),
]


def hostile_configs() -> Iterator[HostileConfig]:
    """Every hostile config, each breaking one rule."""
    for name, mutate, path, kind in _CASES:
        config = copy.deepcopy(base_config())
        mutate(config)
        yield HostileConfig(name, tomli_w.dumps(config), path, kind)
    yield from _RAW_CASES


# ------------------------------------------------------------------ hostile `config set` inputs


@dataclass(frozen=True)
class HostileSetInput:
    """One ``config set PATH`` that must be refused (exit 2) with ``config.toml`` unchanged:
    ``stdin`` is what standard input holds (None: /dev/null), ``value`` the VALUE argument
    (None: read from stdin), ``secret`` whether the path it is tried on must be a secret."""

    name: str
    stdin: bytes | None
    value: str | None
    secret: bool


# nothing to read is not an empty value: a cron job or a CI step started without input erased
# a working key and reported `set`; clearing a secret is `config unset`, never an empty string
HOSTILE_SET_INPUTS: tuple[HostileSetInput, ...] = (
    HostileSetInput("stdin_dev_null", None, None, secret=False),
    HostileSetInput("stdin_dev_null_secret", None, None, secret=True),
    HostileSetInput("stdin_empty_pipe", b"", None, secret=False),
    HostileSetInput("stdin_empty_pipe_secret", b"", None, secret=True),
    HostileSetInput("stdin_one_newline", b"\n", None, secret=False),
    HostileSetInput("stdin_one_newline_secret", b"\n", None, secret=True),
    HostileSetInput("stdin_one_crlf_secret", b"\r\n", None, secret=True),
    HostileSetInput("empty_argument_secret", None, "", secret=True),
)
