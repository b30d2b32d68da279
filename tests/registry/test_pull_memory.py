"""A pull into a folder holds nothing per file: each layer's listing and the digests of the
files it made are kept on disk until the verification has read them, so its memory does not
grow with the number of files (06 P4)."""

from __future__ import annotations

from pathlib import Path

from support import bundlefactory as bf
from support.kit import run_cli, run_cli_peak, tree_snapshot
from support.registry_server import Registry


def _spread(bundle: Path, count: int) -> None:
    """``count`` small workspace files over 40 folders, then checksums and manifest to match."""
    for index in range(count):
        folder = bundle / "workspace" / f"spread-{index % 40:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"file-{index:06d}-{'x' * 40}.txt").write_bytes(b"%d\n" % index)
    bf.reseal(bundle)


def _contents(root: Path) -> dict[str, tuple[object, ...]]:
    return {path: (kind, content) for path, (kind, _mode, content) in tree_snapshot(root).items()}


def _peak_pull_mib(ref: str, out: Path) -> float:
    """The peak resident memory of ``bundler bundle pull REF OUT``, a process of its own."""
    proc, peak = run_cli_peak(["--quiet", "bundle", "pull", ref, str(out), "--plain-http"])
    assert proc.returncode == 0, proc.stderr
    return peak


def test_pull_memory_does_not_grow_with_the_number_of_files(
    registry: Registry, tmp_path: Path
) -> None:
    """Ten times the files, the same peak memory within a few MiB (a listing and a digest
    held per file cost about 0.7 KiB a file: 12 MiB more at 20,000 than at 2,000)."""
    peaks = {}
    for files in (2_000, 20_000):
        bundle = bf.build_bundle(tmp_path / f"bundle-{files}")
        _spread(bundle, files)
        ref = registry.ref(f"memory/b{files}:1")
        pushed = run_cli(["bundle", "push", str(bundle), ref, "--plain-http"])
        assert pushed.returncode == 0, pushed.stderr
        outs = [tmp_path / f"pulled-{files}-{n}" for n in range(2)]
        peaks[files] = min(_peak_pull_mib(ref, out) for out in outs)
        # what was pulled is the bundle, every file of it (the modes are the archive form's)
        assert _contents(outs[0]) == _contents(bundle)
    assert peaks[20_000] - peaks[2_000] < 4.0, peaks
