"""P5 of 06 §1: closure planning in a 5,000-agent config vs a 50-agent config (bar: <= 3x).

Both configs are generated in memory (seeded) and hold the same closure shape for the measured
agent: a model provider with a three-level fallback chain, a summary provider through its
runtime profile, TTS, two MCP bundles granting three servers, a skill bundle and a knowledge
bundle. The big config adds 4,950 agents, ~5,000 providers and ~2,000 servers around it, the
granted servers placed at the *end* of ``mcp.servers`` (the planner's worst case). Each plan is
timed many times, alternating the two configs, and the median ratio is printed.

``--sweep`` also measures the secret sweep's throughput (MB/s, 100 secrets, random bytes).

    python tools/bench.py planner [--repeat N] [--sweep MB]
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bundler.bundle.closure import plan_closure  # noqa: E402
from bundler.rules.secrets import sweep_targets  # noqa: E402
from bundler.rules.sweeper import Sweeper  # noqa: E402

ROOT = Path("/srv/bench-install")
AGENT = "measured"
FAMILIES = ("openai", "anthropic", "groq", "mistral", "deepseek", "xai", "together", "fireworks")


def _token(rng: random.Random, n: int = 32) -> str:
    return "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        for _ in range(n)
    )


def build_config(agents: int, providers: int, servers: int, seed: int = 5) -> dict[str, Any]:
    """A config of ``agents`` agents, ``providers`` model providers and ``servers`` MCP servers.

    The measured agent's closure is the same whatever the sizes; the rest is filler of the same
    kinds (each filler agent references filler entries, with fallbacks among them).
    """
    rng = random.Random(seed)
    models: dict[str, dict[str, Any]] = {}
    filler_refs: list[str] = []
    for i in range(providers):
        family = FAMILIES[i % len(FAMILIES)]
        ref = f"{family}.p{i}"
        filler_refs.append(ref)
        models.setdefault(family, {})[f"p{i}"] = {"api_key": _token(rng), "model": f"m{i}"}
    for ref in filler_refs:
        family, alias = ref.split(".")
        models[family][alias]["fallback"] = rng.sample(filler_refs, k=min(2, len(filler_refs)))
    # the measured closure: main -> fb1 -> fb2 -> fb3 (-> fb4, cut), plus a summary provider
    chain = ["anthropic.main", "openai.fb1", "groq.fb2", "mistral.fb3", "xai.fb4"]
    for i, ref in enumerate(chain):
        family, alias = ref.split(".")
        models.setdefault(family, {})[alias] = {
            "api_key": _token(rng),
            "model": "big",
            "fallback": [chain[i + 1]] if i + 1 < len(chain) else [],
            "extra_headers": {"X-Org.Id": _token(rng, 20)},
        }
    models["openai"]["summarizer"] = {"api_key": _token(rng), "model": "small"}
    server_list: list[dict[str, Any]] = [
        {
            "name": f"srv{i}",
            "command": "npx",
            "args": ["-y", f"pkg{i}"],
            "env": {"TOKEN": _token(rng)},
        }
        for i in range(max(0, servers - 3))
    ]
    server_list += [
        {
            "name": "github",
            "command": "npx",
            "args": ["-y", "gh"],
            "env": {"GITHUB_TOKEN": _token(rng)},
        },
        {"name": "search", "transport": "http", "url": "https://search.example/mcp"},
        {"name": "shell", "command": "sh"},
    ]
    config: dict[str, Any] = {
        "providers": {"models": models, "tts": {"elevenlabs": {"voice": {"api_key": _token(rng)}}}},
        "risk_profiles": {"guarded": {"level": "supervised", "allowed_commands": ["git"]}},
        "runtime_profiles": {
            "fast": {
                "max_tool_iterations": 12,
                "context_compression": {"summary_provider": "openai.summarizer"},
            }
        },
        "skill_bundles": {"tools": {"include": ["a", "b"]}},
        "knowledge_bundles": {"docs": {"sources": ["https://example.org/docs"]}},
        "mcp_bundles": {
            "dev": {"servers": ["github", "shell", "ghost"]},
            "web": {"servers": ["search", "shell"], "exclude": ["shell"]},
        },
        "mcp": {"servers": server_list},
        "channels": {"telegram": {"main": {"bot_token": _token(rng)}}},
    }
    agents_table: dict[str, Any] = {}
    for i in range(max(0, agents - 1)):
        agents_table[f"agent{i}"] = {
            "model_provider": rng.choice(filler_refs) if filler_refs else "anthropic.main",
            "risk_profile": "guarded",
            "mcp_bundles": ["dev"],
        }
    agents_table[AGENT] = {
        "model_provider": "anthropic.main",
        "tts_provider": "elevenlabs.voice",
        "risk_profile": "guarded",
        "runtime_profile": "fast",
        "skill_bundles": ["tools"],
        "knowledge_bundles": ["docs"],
        "mcp_bundles": ["dev", "web"],
        "channels": ["telegram.main"],
    }
    config["agents"] = agents_table
    return config


def _time_plan(config: dict[str, Any], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        plan_closure(config, AGENT, ROOT)
    return (time.perf_counter() - start) / inner


def measure_planner(repeat: int, inner: int) -> tuple[float, float, float]:
    """Median seconds per plan in the big and the small config, and their ratio."""
    big = build_config(5000, 5000, 2000)
    small = build_config(50, 50, 20)
    _time_plan(big, inner)
    _time_plan(small, inner)  # warm caches (schema load, imports)
    big_times, small_times, ratios = [], [], []
    for _ in range(repeat):
        b = _time_plan(big, inner)
        s = _time_plan(small, inner)
        big_times.append(b)
        small_times.append(s)
        ratios.append(b / s)
    return statistics.median(big_times), statistics.median(small_times), statistics.median(ratios)


def measure_sweep(megabytes: int, kind: str) -> float:
    """MB/s of the sweep with 100 secrets (06 §1) over ``kind`` data: random, text or base64."""
    rng = random.Random(11)
    secrets_config = {
        "providers": {
            "models": {
                "openai": {
                    f"p{i}": {"api_key": _token(rng, rng.randint(20, 48))} for i in range(100)
                }
            }
        }
    }
    targets, _ = sweep_targets(secrets_config)
    sweeper = Sweeper(targets)
    if kind == "random":
        data = os.urandom(1 << 20) * megabytes
    elif kind == "base64":
        data = base64.b64encode(os.urandom(megabytes * 3 << 18))[: megabytes << 20]
    else:
        words = [_token(rng, rng.randint(2, 9)).lower() for _ in range(2000)]
        line = " ".join(rng.choice(words) for _ in range(200000)).encode()
        data = (line * (megabytes * (1 << 20) // len(line) + 1))[: megabytes << 20]
    stream = sweeper.stream("bench")
    start = time.perf_counter()
    for offset in range(0, len(data), 1 << 20):
        stream.feed(memoryview(data)[offset : offset + (1 << 20)])
    stream.close()
    return megabytes / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    """Print P5 (and, with ``--sweep``, the sweep throughput); exit 1 when the bar is missed."""
    parser = argparse.ArgumentParser(
        prog="bench.py planner", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--repeat", type=int, default=15, help="timed rounds per config (median taken)"
    )
    parser.add_argument("--inner", type=int, default=20, help="plans per timed round")
    parser.add_argument(
        "--sweep",
        type=int,
        default=0,
        metavar="MB",
        help="also time the secret sweep over MB of data",
    )
    args = parser.parse_args(argv)
    big, small, ratio = measure_planner(args.repeat, args.inner)
    print(
        f"P5 planning: 5,000-agent config {big * 1e3:.3f} ms, "
        f"50-agent config {small * 1e3:.3f} ms, ratio {ratio:.2f}x (bar <= 3x, goal <= 1.5x)"
    )
    if args.sweep:
        for kind in ("random", "text", "base64"):
            rate = measure_sweep(args.sweep, kind)
            print(
                f"sweep ({kind} bytes): {rate:.1f} MB/s over {args.sweep} MB, 100 secrets, one pass"
            )
    return 0 if ratio <= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
