"""Secret values for an import: ``--secret``, ``--secrets-file`` and the terminal prompt (03 §3.1);
and the value ``config set`` reads from standard input or the terminal when none is given.

A value given here goes into the merged config and nowhere else: no message, log or receipt of
this module quotes one. An argument that might be a value (a ``--secret`` without ``PATH=``) is
never shown, and a secrets file that does not parse is reported by its name only.
"""

from __future__ import annotations

import errno
import getpass
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import tomli_w

from bundler.bundle import fragment
from bundler.errors import (
    BundlerError,
    Malformed,
    NoAnswer,
    PolicyRefused,
    TooLarge,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules import hints, tomlcompat
from bundler.rules.names import escape_display, is_text
from bundler.rules.paths import format_path, parse_path
from bundler.rules.values import not_text


class Prompter(Protocol):
    """The terminal side of an import: secret entry without echo, and consent."""

    def secret(self, path: str, endpoint: str) -> str:
        """A value for the secret at ``path`` (sent to ``endpoint``); ``""`` leaves it unfilled."""

    def confirm(self, question: str) -> bool:
        """True when the user typed ``y`` or ``yes`` (any case)."""


def split_assignment(text: str, option: str, *, secret: bool = False) -> tuple[str, str]:
    """``PATH=VALUE`` split at the first ``=`` outside a quoted path segment.

    With ``secret`` (always for ``--secret``) an argument that does not split is never shown,
    not even in part: when ``PATH=`` was forgotten, the whole argument is the secret value.
    """
    quoted = escaped = False
    for index, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "=" and not quoted:
            return text[:index], text[index + 1 :]
    if secret or option == "--secret":
        raise UsageError(
            f"{option}: expected PATH=VALUE (the argument is not shown: it may be a secret)",
            path=option,
        )
    shown = escape_display(text)
    raise UsageError(f"{option} {shown}: expected PATH=VALUE", path=shown)


def flatten_secrets(
    table: Mapping[str, Any], prefix: Sequence[str] = (), *, source: str = "secrets file"
) -> dict[str, str]:
    """A secrets file's table as ``{config path: value}``.

    Top-level keys are config paths (``"providers.models.openai.main.api_key" = "…"``); nested
    tables spell the same path as TOML tables. Values must be strings; the error names
    ``source`` (``secrets file F``) and the path.
    """
    out: dict[str, str] = {}
    for key, value in table.items():
        try:
            segments = [*prefix, key] if prefix else parse_path(key)
        except UsageError as err:
            raise UsageError(f"{source}: {err.message}", path=key) from None
        if isinstance(value, dict):
            out.update(flatten_secrets(value, segments, source=source))
        elif isinstance(value, str):
            out[format_path(segments)] = value
        else:
            path = format_path(segments)
            raise Malformed(f"{source}: {escape_display(path)} must be a string", path=path)
    return out


def endpoint_of(config: Mapping[str, Any], path: str) -> str:
    """Where the secret at ``path`` will be sent (:func:`bundler.bundle.fragment.
    secret_endpoint`), escaped for display."""
    return escape_display(fragment.secret_endpoint(config, parse_path(path)))


def secrets_template(
    fragment_config: Mapping[str, Any],
    required: Sequence[str],
    *,
    bundle: str,
    source: str | None = None,
    out: str | None = None,
    install: str | None = None,
) -> str:
    """The ``--secrets-file`` skeleton of a bundle's ``required`` secret paths: one
    ``"path" = ""`` line each (the form :func:`flatten_secrets` reads), under a comment saying
    where the value will be sent. ``bundle`` and ``out`` (the template's file, if any) are paths
    as the user gave them; ``source`` is the BUNDLE the import command names (default:
    ``bundle``'s absolute path); ``install`` is the ``--install`` given, for that command."""
    command = hints.command(
        "agents",
        "import",
        os.path.abspath(bundle) if source is None else source,
        "--secrets-file",
        os.path.abspath(out) if out else "FILE",
        install=install,
    )
    head = [
        f"# Secrets required by the bundle {escape_display(bundle)}.",
        "# Fill in each value between the quotes; a value left empty stays unfilled.",
        "# Keep this file private (mode 0600) and import with:",
        f"#   {command}",
    ]
    body: list[str] = []
    for path in required:
        try:
            endpoint = fragment.secret_endpoint(fragment_config, parse_path(path))
        except UsageError:
            continue  # not a config path: verification refuses such a bundle anyway
        body += ["", f"# sent to {escape_display(endpoint)}", tomli_w.dumps({path: ""}).strip()]
    if not body:
        body = ["", "# this bundle requires no secrets"]
    return "\n".join([*head, *body]) + "\n"


def collect_secrets(
    secret_args: Sequence[str], secrets_file: Path | None
) -> tuple[dict[str, str], list[str]]:
    """Secrets from ``--secret`` and ``--secrets-file``; returns (values, warnings)."""
    values: dict[str, str] = {}
    warnings: list[str] = []
    if secrets_file is not None:
        # an empty value is a template line not filled in: the secret stays unfilled, as an
        # empty answer to the prompt leaves it
        values.update({p: v for p, v in load_secrets_file(secrets_file).items() if v})
    if secret_args:
        warnings.append(SECRET_ARGUMENT_WARNING)
    for raw in secret_args:
        path, value = split_assignment(raw, "--secret", secret=True)
        if not is_text(value):
            raise not_text(f"--secret {escape_display(path)}", "the value")
        values[path] = value
    return values, warnings


_MAX_SECRETS_FILE_BYTES = 16 << 20


def load_secrets_file(path: Path) -> dict[str, str]:
    """A ``--secrets-file``: a TOML table of secret paths; refused when group/others can read it."""
    shown = escape_display(str(path))

    def private_to_its_owner(st: os.stat_result) -> None:
        if st.st_mode & 0o044:
            raise PolicyRefused(
                f"secrets file {shown} is readable by group or others; chmod 600 it", path=str(path)
            )

    try:
        raw = read_small_file(path, _MAX_SECRETS_FILE_BYTES, check=private_to_its_owner)
    except NotSmallFile as why:
        if why.too_large:
            raise TooLarge(f"secrets file {shown} {why.reason}", path=str(path)) from None
        raise UnsuitablePath(f"secrets file {shown} {why.reason}", path=str(path)) from None
    except OSError as exc:
        raise os_failure(
            f"cannot read secrets file {shown} ({os.strerror(exc.errno or errno.EIO)})",
            exc,
            path=str(path),
        ) from None
    # the parser's message may quote a line of the file, which holds secrets: say only where.
    # Raised outside any handler, so that no decode error (holding the bytes) is chained to it.
    table = _parse_secrets(raw)
    if table is None:
        raise Malformed(
            f'secrets file {shown} is not a TOML table of path = "value"', path=str(path)
        )
    return flatten_secrets(table, source=f"secrets file {shown}")


SECRET_ARGUMENT_WARNING = (
    "--secret values are visible to other users of this machine (ps, shell history); "
    "prefer --secrets-file"
)


def is_yes(answer: str) -> bool:
    """True for ``y`` or ``yes`` in any case, surrounding blanks ignored."""
    return answer.strip().lower() in ("y", "yes")


def is_secrets_file(raw: bytes) -> bool:
    """Whether ``raw`` reads as a ``--secrets-file`` (a TOML table of paths to text): what
    ``secrets-template --force`` may replace, unlike any other file (a config, say)."""
    table = _parse_secrets(raw)
    if table is None:
        return False
    try:
        flatten_secrets(table)
    except BundlerError:
        return False
    return True


def _parse_secrets(raw: bytes) -> dict[str, Any] | None:
    text = tomlcompat.decode_utf8(raw)
    if text is None:
        return None
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError:
        return None


def ask_secret(prompt: str, path: str, hint: str) -> str:
    """The value for ``path`` typed at the terminal without echo (:func:`getpass.getpass`).

    End of input (Ctrl-D) raises :class:`UsageError` saying what to do (``hint``); bytes that
    are not UTF-8 raise :class:`InvalidInput`. Neither shows or chains what was typed.
    """
    try:
        return getpass.getpass(prompt)
    except EOFError:
        raise UsageError(
            f"{escape_display(path)}: no value was typed (end of input); {hint}", path=path
        ) from None
    except UnicodeDecodeError:
        raise not_text(escape_display(path), "the value typed") from None


def config_value_from(
    stream: BinaryIO | None, path: str, *, named_install: str | None = None
) -> str:
    """The value for ``config set PATH`` from ``stream`` (``None``: the process has no standard
    input): typed without echo when it is a terminal, else its bytes as UTF-8 text, one line
    end dropped. ``path`` is the canonical config path; ``named_install`` the ``--install``
    the suggested command repeats.

    Nothing read is refused, not taken for an empty value: a cron job or a CI step started
    without input would otherwise erase the field and report success. No error quotes what was
    read.
    """
    if stream is None:
        # a closed stdin's stand-in reads as empty, which would set the field to "" unsaid
        raise NoAnswer(
            f"no value for {escape_display(path)}: standard input is closed; pipe the value "
            "in, or run the command at a terminal and type it",
            path=path,
        )
    if stream.isatty():
        value = ask_secret(
            f"value for {path} (not echoed): ", path, "run config set again and type the value"
        )
    else:
        raw = tomlcompat.decode_utf8(stream.read())
        if raw is None:
            raise not_text(escape_display(path), "the value read from standard input")
        value = raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith("\n") else raw
    if value == "":
        raise UsageError(
            hints.Hinted(
                f"no value read from standard input, so {escape_display(path)} is unchanged; "
                "to clear the field, unset it",
                hints.command("config", "unset", path, install=named_install),
            ),
            path=path,
        )
    return value


def passphrase_prompter() -> Callable[[str], str] | None:
    """Asks, without echo on the terminal, for the passphrase of the key file it is given;
    None when stdin is not a terminal (a protected key is then refused, never read blind)."""
    import sys

    if not sys.stdin.isatty():
        return None

    def ask(shown: str) -> str:
        return ask_secret(
            f"passphrase for {shown} (not echoed): ",
            shown,
            "run the command again on a terminal, or give an age identity",
        )

    return ask


def default_prompter() -> Prompter | None:
    """A :class:`Prompter` on the controlling terminal, or None when stdin is not a terminal."""
    import sys

    if not sys.stdin.isatty():
        return None

    class _Terminal:
        def secret(self, path: str, endpoint: str) -> str:
            return ask_secret(
                f"{escape_display(path)} (sent to {endpoint}; not echoed, empty to skip): ",
                path,
                "run the import again, and press Enter at a prompt to leave that secret unfilled",
            )

        def confirm(self, question: str) -> bool:
            # ask where getpass asks: the terminal itself, not a redirected stderr
            try:
                fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    os.write(fd, (question + ": ").encode("utf-8", "replace"))
                    answer = b""
                    while not answer.endswith(b"\n") and (chunk := os.read(fd, 1024)):
                        answer += chunk
                    return is_yes(answer.decode("utf-8", "replace"))
                finally:
                    os.close(fd)
            else:
                print(question, end=": ", file=sys.stderr, flush=True)
                return is_yes(sys.stdin.buffer.readline().decode("utf-8", "replace"))

    return _Terminal()
