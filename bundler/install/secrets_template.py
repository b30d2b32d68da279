"""``bundle secrets-template``: a verified bundle's required secrets as the ``--secrets-file``
skeleton an import reads (03 §3.1), returned, or written to a new private file.

The template holds no value, only paths and where each value will be sent; the file is made
0600 all the same, since it is meant to be filled in where it lies.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.errors import DestinationExists, os_failure
from bundler.rules.names import escape_display

if TYPE_CHECKING:
    from bundler.bundle.verify_report import VerifyReport


@dataclass
class SecretsTemplate:
    """What :func:`make_template` made: the bundle's ``verify`` report; when it passed, the
    ``required`` secret paths and the template ``text``, and ``out``, the file written (as
    given; ``None`` when the template was only returned)."""

    verify: VerifyReport
    required: list[str] = field(default_factory=list)
    text: str = ""
    out: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the bundle verified and a template was made."""
        return self.verify.ok and self.verify.manifest is not None

    def as_json(self) -> dict[str, Any]:
        """``{"required_secrets", "out"}``; a bundle that failed verification: its report's."""
        if not self.ok:
            return self.verify.as_json()
        return {"required_secrets": self.required, "out": self.out}


def make_template(
    report: VerifyReport,
    *,
    bundle: str,
    source: str,
    out: str | None = None,
    force: bool = False,
    install: str | None = None,
) -> SecretsTemplate:
    """The template of the bundle ``report`` verified (nothing when it failed); written to a
    new 0600 file ``out`` when given (an existing secrets file replaced only with ``force``).
    ``bundle`` is the bundle as shown, ``source`` as the printed import command names it, and
    ``install`` the install that command names (none when ``None``)."""
    from bundler.install.bind_secrets import secrets_template

    made = SecretsTemplate(report, out=out)
    if not made.ok or report.manifest is None:
        return made
    made.required = [p for p in report.manifest.get("required_secrets", []) if isinstance(p, str)]
    made.text = secrets_template(
        report.fragment or {},
        made.required,
        bundle=bundle,
        source=source,
        out=out,
        install=install,
    )
    if out is not None:
        _write_private(Path(out), made.text, force=force)
    return made


def _refuse_replacing_another_file(dir_fd: int, target: Path) -> None:
    """``force`` replaces a secrets file, never a device, a link, a folder or another file
    (the install's config.toml, say, whose keys it would wipe)."""
    from bundler.fs.smallfile import NotSmallFile, read_small_file
    from bundler.install.bind_secrets import is_secrets_file

    shown = escape_display(str(target))
    try:
        raw = read_small_file(target.name, 16 << 20, dir_fd=dir_fd, follow=False)
    except FileNotFoundError:
        return
    except (NotSmallFile, OSError):
        raw = None
    if raw is None or not is_secrets_file(raw):
        raise DestinationExists(
            f"{shown} exists and is not a secrets file; --force replaces only one: choose "
            "another file, or remove it yourself first",
            path=str(target),
        )


def _write_private(target: Path, text: str, *, force: bool) -> None:
    """Create ``target`` 0600 holding ``text``; an existing file is replaced only with ``force``
    (then atomically, synced before the rename; a new file is synced with its folder)."""
    from bundler.fs import durable

    shown = escape_display(str(target))
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise os_failure(
            f"cannot write {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=str(target)
        ) from None
    # paths in the text keep their bytes, as the command they are pasted into needs them
    data = text.encode("utf-8", "surrogateescape")
    try:
        if force:
            _refuse_replacing_another_file(dir_fd, target)
            durable.atomic_write(dir_fd, target.name, data, mode=0o600)
        else:
            durable.create_synced(dir_fd, target.name, data, mode=0o600)
    except FileExistsError:
        raise DestinationExists(
            f"{shown} exists (it may hold secrets already filled in); choose another file, "
            "or add --force to replace it",
            path=str(target),
        ) from None
    except OSError as exc:
        raise os_failure(
            f"cannot write {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=str(target)
        ) from None
    finally:
        os.close(dir_fd)
