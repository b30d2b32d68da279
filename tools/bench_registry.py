#!/usr/bin/env python3
"""Issue 16: ``bundle push`` / ``bundle pull`` vs curl moving the same bytes through the registry.

    python tools/bench.py push|pull [--root /tmp/bundler-bench] [--rounds 3]

The bundle is the reference bundle of ``bench.py verify`` (the reference tree as agent a00's
workspace). A CNCF distribution registry (Debian ``docker-registry``) is started on a free
loopback port with its storage under ``--root``. The curl side moves exactly the blobs and the
manifest ``bundle push`` makes (written to files once, untimed): a monolithic upload per blob
(POST for the session, PUT of the bytes), then the manifest; for pull, a GET of the manifest
and of each blob into files. Every round pushes to a new repository, so every blob is uploaded
on both sides. The median of the per-round ratios is reported (bar <= 1.3x), with the peak
resident memory of our process.

A push into a repository without tags (the first push of an agent) streams each layer as it is
made; ``--existing`` first tags a small other bundle in each round's repository, so the push
takes the other path (every layer hashed into a spool first, then uploaded when missing): its
worst case, since here every layer is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BAR_RATIO = 1.3
REPO_ROOT = Path(__file__).resolve().parent.parent


def _registry(root: Path) -> object:
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from registry_server import Registry

    base = root / "registry"
    if base.exists():
        shutil.rmtree(base)
    return Registry(base).start()


def _artifact_files(bundle: Path, out: Path) -> tuple[Path, list[tuple[str, Path]]]:
    """The manifest and the blobs ``bundle push`` makes of ``bundle``, as files for curl."""
    from bundler.bundle.archive_write import write_tar
    from bundler.bundle.manifest import MANIFEST_NAME
    from bundler.fs.durable import open_dir
    from bundler.registry import artifact as art
    from bundler.registry.push import plan_layers

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    fd = open_dir(bundle, follow=False)
    blobs: list[tuple[str, Path]] = []
    try:
        config_bytes = (bundle / MANIFEST_NAME).read_bytes()
        import hashlib

        config = art.Descriptor(
            art.CONFIG_TYPE, f"sha256:{hashlib.sha256(config_bytes).hexdigest()}", len(config_bytes)
        )
        (out / "config").write_bytes(config_bytes)
        blobs.append((config.digest, out / "config"))
        descriptors = []
        for layer in plan_layers(fd):
            path = out / layer.title
            with open(path, "wb") as handle:
                write_tar(fd, layer.names, handle)
            blobs.append((layer.digest, path))
            descriptors.append(
                art.Descriptor(art.LAYER_TYPE, layer.digest, layer.size, layer.title)
            )
    finally:
        os.close(fd)
    manifest = out / "manifest.json"
    manifest.write_bytes(art.render_manifest(art.Artifact(config, descriptors, {})))
    return manifest, blobs


def _curl_push_script(host: str, manifest: Path, blobs: list[tuple[str, Path]]) -> str:
    lines = ["set -e", 'repo="$1"']
    for digest, path in blobs:
        lines.append(
            f'loc=$(curl -sS -o /dev/null -D - -X POST "http://{host}/v2/$repo/blobs/uploads/" '
            "| tr -d '\\r' | sed -n 's/^[Ll]ocation: //p')"
        )
        lines.append(
            f'curl -sS -f -o /dev/null -X PUT -H "Content-Type: application/octet-stream" '
            f'--data-binary @{path} "$loc&digest={digest}"'
        )
    lines.append(
        "curl -sS -f -o /dev/null -X PUT "
        '-H "Content-Type: application/vnd.oci.image.manifest.v1+json" '
        f'--data-binary @{manifest} "http://{host}/v2/$repo/manifests/1"'
    )
    return "\n".join(lines)


def _curl_pull_script(host: str, blobs: list[tuple[str, Path]], *, untar: bool = False) -> str:
    """GET the manifest and every blob; with ``untar``, also unpack each layer (``tar -x``)
    and sync, which is what a pull that leaves a usable folder must do too."""
    lines = ["set -e", 'repo="$1"', 'out="$2"', 'mkdir -p "$out/tree"']
    lines.append(
        f'curl -sS -f -o "$out/manifest" -H "Accept: application/vnd.oci.image.manifest.v1+json" '
        f'"http://{host}/v2/$repo/manifests/1"'
    )
    for index, (digest, _path) in enumerate(blobs):
        lines.append(f'curl -sS -f -L -o "$out/{index}" "http://{host}/v2/$repo/blobs/{digest}"')
        if untar and index:
            lines.append(f'tar -xf "$out/{index}" -C "$out/tree"')
    if untar:
        lines.append('sync -f "$out"')
    return "\n".join(lines)


def _small_bundle(root: Path) -> Path:
    """The shipped example's researcher, exported once: a tag to make a repository non-empty."""
    bundle = root / "small-bundle"
    if not bundle.exists():
        install = REPO_ROOT / "examples" / "install"
        subprocess.run(
            [sys.executable, "-m", "bundler", "--install", str(install), "--quiet"]
            + ["agents", "export", "researcher", "--out", str(bundle)],
            check=True,
        )
    return bundle


def _run(argv: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in KiB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return elapsed, usage.ru_maxrss


def main(argv: list[str], which: str = "push") -> int:
    """Print the push or pull ratio and whether the bar holds (exit 1 when it does not)."""
    parser = argparse.ArgumentParser(prog=f"bench.py {which}", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--existing", action="store_true", help="push into repositories that already hold a tag"
    )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_export import add_tree_options

    add_tree_options(parser)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    from bench_verify import _ensure_bundle

    bundle = _ensure_bundle(args.root, args)
    registry = _registry(args.root)
    try:
        manifest, blobs = _artifact_files(bundle, args.root / "curl-blobs")
        size = sum(path.stat().st_size for _d, path in blobs)
        host = registry.host  # type: ignore[attr-defined]
        push_script = _curl_push_script(host, manifest, blobs)
        pull_script = _curl_pull_script(host, blobs)
        untar_script = _curl_pull_script(host, blobs, untar=True)
        untar_s: list[float] = []
        ours_push = [sys.executable, "-m", "bundler", "--quiet", "bundle", "push", str(bundle)]
        ratios, ours_s, theirs_s, peaks = [], [], [], []
        for round_ in range(args.rounds + 1):
            repo_ours, repo_curl = f"bench/ours{round_}", f"bench/curl{round_}"
            ref = f"oci://{host}/{repo_ours}:1"
            if args.existing:
                seed = ref.rsplit(":", 1)[0] + ":seed"
                _run([*ours_push[:-1], str(_small_bundle(args.root)), seed, "--plain-http"])
            ours = _run([*ours_push, ref, "--plain-http"])
            theirs = _run(["sh", "-c", push_script, "push", repo_curl])
            if which == "pull":
                dest = args.root / "pulled"
                shutil.rmtree(dest, ignore_errors=True)
                shutil.rmtree(args.root / "curl-pulled", ignore_errors=True)
                pull = [sys.executable, "-m", "bundler", "--quiet", "bundle", "pull"]
                ours = _run([*pull, ref, str(dest), "--plain-http"])
                theirs = _run(
                    ["sh", "-c", pull_script, "pull", repo_curl, str(args.root / "curl-pulled")]
                )
                shutil.rmtree(args.root / "curl-untarred", ignore_errors=True)
                untarred = _run(
                    ["sh", "-c", untar_script, "pull", repo_curl, str(args.root / "curl-untarred")]
                )
                if round_:
                    untar_s.append(untarred[0])
            if round_ == 0:
                continue  # warm-up: page cache, registry start-up
            ours_s.append(ours[0])
            theirs_s.append(theirs[0])
            peaks.append(ours[1])
            ratios.append(ours[0] / theirs[0])
        ratio = statistics.median(ratios)
    finally:
        registry.kill()  # type: ignore[attr-defined]
    ok = ratio <= BAR_RATIO
    print(
        f"bundle {which} vs curl through the registry API ({size / 1e6:.0f} MB): median "
        f"{ratio:.2f}x (bar <= {BAR_RATIO}x) {'ok' if ok else 'FAIL'}"
    )
    print(
        f"   ours s: {' '.join(f'{t:.2f}' for t in ours_s)}   curl s: "
        f"{' '.join(f'{t:.2f}' for t in theirs_s)}   our peak RSS: {max(peaks) // 1024} MiB"
    )
    if untar_s:
        also = statistics.median(a / b for a, b in zip(ours_s, untar_s, strict=True))
        print(
            f"   for scale, vs curl + tar -x of each layer + sync -f: median {also:.2f}x "
            f"(s: {' '.join(f'{t:.2f}' for t in untar_s)})"
        )
    return 0 if ok else 1


def main_push(argv: list[str]) -> int:
    """``bench.py push``."""
    return main(argv, "push")


def main_pull(argv: list[str]) -> int:
    """``bench.py pull``."""
    return main(argv, "pull")
