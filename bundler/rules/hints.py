"""Paste-this commands: every ``bundler …`` command the program prints for the user to run.

One rule, written once (05 §3): a hint runs against the same install as the command that printed
it. An install chosen with ``--install DIR`` on the command line is repeated as
``--install <absolute DIR>``; one chosen by ``$ZEROCLAW_CONFIG_DIR`` or the default is not (the
pasted command finds it the same way). Every word is shell-quoted, so a path with spaces or quotes
pastes as one argument; a word holding a control or bidirectional character is
written in ``$'…'`` form with ``\\xNN``/``\\uNNNN`` escapes, so the printed line can neither
rewrite the terminal nor hide what it runs, and still pastes into bash and zsh.

Printers put each hint on a line of its own and never wrap it (a cut command run half is worse
than none).
"""

from __future__ import annotations

import os
import shlex

from bundler.rules.names import escape_display

PROGRAM = "bundler"


def install_words(cli_install: str | None) -> list[str]:
    """``["--install", DIR]`` when the install was given on the command line, else ``[]``.

    ``cli_install`` is the ``--install`` value exactly as parsed (None when not given); the
    directory is made absolute so the hint works from any working directory.
    """
    if not cli_install:
        return []
    chosen = os.path.expanduser(cli_install) if cli_install.startswith("~") else cli_install
    return ["--install", os.path.abspath(chosen)]


def quote_word(word: str) -> str:
    """One shell word: ``shlex.quote``, or ``$'…'`` when the word has characters that are not
    shown as themselves (control and bidirectional characters)."""
    shown = escape_display(word)
    if shown == word:
        return shlex.quote(word)
    # escape_display leaves backslashes alone; inside $'…' a lone one would start an escape
    body = escape_display(word.replace("\\", "\\\\")).replace("'", "\\'")
    return f"$'{body}'"


def shell_line(*words: str) -> str:
    """The paste-ready line of ``words``, each one shell word (:func:`quote_word`)."""
    return " ".join(quote_word(word) for word in words)


def command(*words: str, install: str | None = None) -> str:
    """The paste-ready line ``bundler [--install DIR] WORDS…`` (see the module's rule).

    ``install`` is the ``--install`` value as given on the command line, or None.
    """
    return shell_line(PROGRAM, *install_words(install), *words)


def looked_at(install_root: str | os.PathLike[str]) -> str:
    """The install a message is about, and how to point at another (01 §1): ``"DIR (the install
    bundler looked at); to use another install, give --install DIR or set ZEROCLAW_CONFIG_DIR"``.

    Every message that finds the install missing, empty or in the way ends with it: a new user
    who forgot ``--install`` (or never heard of it) learns which folder was read and the two
    ways to name the right one. It ends a sentence; the caller adds what else may be done.
    """
    shown = escape_display(os.fspath(install_root))
    return (
        f"{shown} (the install bundler looked at); to use another install, give --install DIR "
        "or set ZEROCLAW_CONFIG_DIR"
    )


class Hinted(str):
    """A message that ends with a command to run: ``"<sentence>; run: <command>"``.

    It is a plain ``str`` to every caller (JSON, logs, ``+``); the CLI's printer recognises it
    and puts :attr:`fix` on a line of its own under :attr:`head`. String operations return a
    plain ``str`` again, so build it last, once the sentence is final.
    """

    sentence: str
    head: str
    fix: str

    def __new__(cls, sentence: str, fix: str) -> Hinted:
        made = super().__new__(cls, f"{sentence}; run: {fix}")
        made.sentence = sentence
        made.head = f"{sentence}; run:"
        made.fix = fix
        return made


def lines(prefix: str, message: str) -> list[str]:
    """``message`` as printed lines: one, or two when it is :class:`Hinted` (the command alone,
    indented, on the second)."""
    if isinstance(message, Hinted):
        return [f"{prefix}{message.head}", f"  {message.fix}"]
    return [f"{prefix}{message}"]


__all__ = [
    "PROGRAM",
    "Hinted",
    "command",
    "install_words",
    "lines",
    "looked_at",
    "quote_word",
]
