"""The command line (05): argument parsing, output and exit codes. No logic lives here.

Each command is a handler ``(args, out) -> Result`` in a module of this package; the handler
calls the library and says what to print. Errors are :class:`bundler.errors.BundlerError`
raised anywhere below and printed here on one line (or as the ``--json`` envelope).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import json
import os
import re
import signal
import sys
from collections.abc import Container, Sequence
from types import FrameType
from typing import Any, NoReturn

from bundler import __version__
from bundler.api import process as interrupts
from bundler.api.display import escape_display
from bundler.cli import (
    args_agents,
    args_bundle,
    args_care,
    args_config,
    args_home,
    args_registry,
    args_tree,
)
from bundler.cli.output import (
    Output,
    Result,
    escape_what_cannot_be_encoded,
    stand_in_for_closed_streams,
)
from bundler.cli.parser import Parser, Tree, global_options
from bundler.errors import (
    BundlerError,
    EnvironmentFailure,
    Interrupted,
    Refused,
    UsageError,
    environment_hint,
    os_failure,
)

# command words -> "module:function" of its handler

# the command groups, each with its parser module, in the order 'bundler --help' lists them
_GROUPS = (args_agents, args_bundle, args_config, args_home, args_care, args_registry, args_tree)

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    words: target for group in _GROUPS for words, target in group.HANDLERS.items()
}

# commands that are one word, with no sub-command
SINGLE_WORD = tuple(words[0] for words in HANDLERS if len(words) == 1)

# per command: example argument lists, printed under "examples:" in its help (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    words: examples for group in _GROUPS for words, examples in group.EXAMPLES.items()
}


def build_parser(groups_wanted: Container[str] | None = None) -> argparse.ArgumentParser:
    """The command tree of 05 §1; the commands of a group only when ``groups_wanted`` holds it.

    Every group is listed either way; the CLI builds only the group it was given (see
    :func:`_group_word`), since building every command's parser is most of ``--help``'s time.
    """
    parser = Parser(
        prog="bundler",
        description=(
            "Move AI agents between installations without losing data or leaking credentials."
        ),
        parents=[global_options(suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"bundler {__version__}")
    groups = parser.add_subparsers(
        dest="group", metavar="COMMAND", parser_class=Parser, help="one of:"
    )
    tree = Tree(root=parser, groups_wanted=groups_wanted, examples=EXAMPLES)
    for group in _GROUPS:
        group.add(groups, tree)
    return parser


def _handler(words: tuple[str, ...]) -> Any:
    target = HANDLERS.get(words)
    if target is None:
        raise UsageError(f"unknown command {' '.join(words)} (see 'bundler --help')")
    module_name, function_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name != module_name:
            raise
        raise BundlerError(f"'bundler {' '.join(words)}' is not implemented yet") from None
    return getattr(module, function_name)


def _parse(
    parser: argparse.ArgumentParser, argv: list[str], out: Output
) -> tuple[argparse.Namespace, list[str]] | int:
    """Parse ``argv``; ``--help`` and ``--version`` print their text and give the exit code.

    The text is printed as any command's result is (:meth:`Output.emit`), so a stdout that
    cannot take it is reported rather than lost (argparse drops its own write errors); with
    ``--json`` it is the ``text`` of the one JSON object, as every other output of a ``--json``
    run is."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return parser.parse_known_args(argv)
    except SystemExit as done:  # argparse's help and version actions, after printing
        if done.code not in (0, None):
            raise
        if out.json_mode:
            return out.emit(Result(payload={"text": printed.getvalue()}))
        return out.emit(Result(text=[printed.getvalue().removesuffix("\n")], verbatim=True))


def _refuse_double_dash_values(argv: Sequence[str]) -> None:
    """``--out=--``: argparse drops a value that is exactly ``--`` (it takes it for the end of
    the options) and hands the command an empty list, which it cannot use."""
    for token in argv:
        if token == "--":
            return
        name, equals, value = token.partition("=")
        if token.startswith("--") and equals and value == "--":
            raise UsageError(
                f"{escape_display(name)}=--: '--' ends the options and cannot be a value; "
                "to name a file '--', write ./--"
            )


def _unrecognized(extras: list[str], args: argparse.Namespace) -> NoReturn:
    """Refuse words no parser took, pointing to the help of the command they were given to.

    Only words shaped like an option name are quoted (:data:`_OPTION_NAME`): any other stray
    word may be a secret (a mistyped ``--secret``, a token that starts with ``-``)."""
    words = ["bundler"]
    group = getattr(args, "group", None)
    if group:
        words.append(group)
        if getattr(args, "command", None):
            words.append(args.command)
    names = [word.split("=", 1)[0] for word in extras]
    options = [name for name in names if _OPTION_NAME.fullmatch(name)]
    others = len(extras) - len(options)
    shown = " ".join(options)
    if others:
        tail = f"{others} other argument(s), not shown as they may be secrets"
        if any(word.startswith("-") for word in extras):
            tail += " (a value that starts with '-' goes after '--')"
        shown = f"{shown} and {tail}" if shown else tail
    raise UsageError(f"unrecognized arguments: {shown} (see '{' '.join(words)} --help')")


# what an option of bundler's looks like: quoted back when mistyped, unlike any other word
_OPTION_NAME = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*|-[A-Za-z]")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if interrupts.interrupt_now(signum):
        name = signal.Signals(signum).name
        raise Interrupted(f"interrupted by {name}; cleaned up", signal_name=name)


def _late_signal_warning() -> str | None:
    """The warning for a signal that arrived after the command committed, if one did."""
    late = interrupts.late_signal()
    if late is None:
        return None
    return f"interrupted by {signal.Signals(late).name} after the change was committed: it stands"


def _system_failure(err: OSError) -> Refused | None:
    """The one-line error for an ``OSError`` the system, not an input, caused; None for any
    other (a bug, which keeps its traceback)."""
    hint = environment_hint(err)
    if hint is None:
        return None
    name = err.filename if isinstance(err.filename, str) else ""
    at = f" at {escape_display(name)}" if name else ""
    reason = err.strerror or os.strerror(err.errno or 0)
    # a full disk is NoSpace, the rest EnvironmentFailure: the errno names the concept
    return os_failure(f"the system failed the command{at} ({reason}): {hint}", err, path=name)


def _out_of_memory(what: str) -> Refused:
    """The one-line error for a command the system ran short of memory for (exit 1)."""
    said = f" ({what})" if what else ""
    return EnvironmentFailure(
        f"not enough memory{said}: free some memory, or raise this process's limits "
        "(ulimit -v, ulimit -u), and try again"
    )


_ERROR_LOST = ("error return without exception set", "returned NULL without setting an exception")


def _error_lost(err: SystemError) -> bool:
    """Whether ``err`` is CPython's report of a call in C that failed without saying why: what
    its import machinery raises when an allocation fails under it (a small ``ulimit -v``), where
    a ``MemoryError`` was due. Any other ``SystemError`` is a bug, which keeps its traceback."""
    return str(err).endswith(_ERROR_LOST)


def out_of_memory_line() -> bytes:
    """The one line a command prints when memory ran out even for its own report of it
    (:func:`bundler.__main__.run` writes it): made before the command runs."""
    return f"error: {_out_of_memory('').message}\n".encode()


def lost_for_want_of_memory(err: BaseException) -> bool:
    """Whether ``err``, escaping :func:`main`, is memory running out in the report of a
    failure: a ``MemoryError``, or a ``SystemError`` of :func:`_error_lost`."""
    return isinstance(err, MemoryError) or (isinstance(err, SystemError) and _error_lost(err))


def _left_behind() -> list[str]:
    """Warnings for scratch folders the command could not remove."""
    return interrupts.left_behind()


def _group_word(argv: Sequence[str]) -> str | None:
    """The command group ``argv`` names: its first word that is not an option or the value of
    ``--install`` (the one global option taking a value). A wrong guess only costs argparse its
    usual error, as the word is then no group."""
    after_install = False
    for word in argv:
        if after_install:
            after_install = False
        elif word == "--install":
            after_install = True
        elif not word.startswith("-"):
            return word
    return None


def _groups_to_build(word: str | None) -> tuple[str, ...] | None:
    """The groups whose commands ``main`` builds parsers for: the one named, or all of them
    (``None``) for the commands that describe the whole tree."""
    if word in args_tree.WHOLE_TREE:
        return None
    return () if word is None else (word,)


def _wants_json(argv: Sequence[str]) -> bool:
    # after "--" every word is an operand, "--json" too (an agent may be named so)
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in options


_YOUNG_OBJECTS = 20_000
"""Allocations between two passes of the garbage collector in the command line's own process."""


def _start_up_done(collecting: bool, *, own_process: bool) -> None:
    """Turn the garbage collector back on once start-up is over.

    Start-up (parsing, the command's imports) makes objects that live as long as the process
    and no garbage cycle, yet the collector ran a dozen times during it, each pass walking
    everything made so far; with it off, ``bundle verify`` of a small bundle starts measurably
    faster. In the process's own run those objects are then frozen, so the command's passes
    never walk them again (not when ``main`` is called in a longer-lived process, whose garbage
    of the moment would be kept for good).

    A command then builds tables that live until it ends (a backup's listings and index: some
    hundred thousand objects at 20,000 files) and rarely a cycle. At CPython's default of a pass
    every 700 allocations, and a full one every hundred passes, the collector took 0.14 s of a
    2.4 s backup; a pass every :data:`_YOUNG_OBJECTS` takes a third of that, and a cycle still
    waits for at most that many allocations (a backup goes further: it pauses the collector
    while it writes and checks its zip, :mod:`bundler.fs.collector`). The threshold is the
    process's, so it too is set only in the process's own run, as is the hook that leaves a
    thread that died before its first step for the command to report on one line.
    """
    if own_process:
        interrupts.quiet_failed_thread_starts()
        gc.freeze()
        gc.set_threshold(_YOUNG_OBJECTS, 10, 10)
    if collecting:
        gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code of 05 §2."""
    argv_given, collecting = argv, gc.isenabled()
    gc.disable()  # until the command runs: see _start_up_done
    argv = list(sys.argv[1:] if argv is None else argv)
    closed = stand_in_for_closed_streams()
    escape_what_cannot_be_encoded()
    out = Output(json_mode=_wants_json(argv), closed=closed)
    # a closed terminal (SIGHUP) and kill (SIGTERM) clean up like Ctrl-C: no staging left behind
    interrupts.begin_command()
    for signum in interrupts.HELD:
        signal.signal(signum, _on_signal)
    try:
        early = interrupts.early_signal()
        if early is not None:  # arrived during start-up, when nothing had been touched yet
            _on_signal(early, None)
        _refuse_double_dash_values(argv)
        word = _group_word(argv)
        parser = build_parser(groups_wanted=_groups_to_build(word))
        parsed = _parse(parser, argv, out)
        if isinstance(parsed, int):
            return parsed
        args, extras = parsed
        if extras:
            _unrecognized(extras, args)
        for option in ("install", "json", "quiet", "no_progress"):
            if not hasattr(args, option):
                setattr(args, option, None if option == "install" else False)
        out.configure(json_mode=args.json, quiet=args.quiet, progress=not args.no_progress)
        if args.group is None:
            parser.print_help(sys.stderr)
            raise UsageError("a command is required (see 'bundler --help')")
        words: tuple[str, ...] = (
            (args.group,)
            if args.group in SINGLE_WORD
            else (args.group, getattr(args, "command", None) or "")
        )
        if words[-1] == "":
            raise UsageError(
                f"'bundler {args.group}' needs a command (see 'bundler {args.group} --help')"
            )
        handler = _handler(words)
        _start_up_done(collecting, own_process=argv_given is None)
        result: Result = handler(args, out)
        late = _late_signal_warning()
        if late is not None:
            result.warnings.append(late)
        result.warnings += _left_behind()
        return out.emit(result)
    except (BundlerError, Interrupted) as err:
        return out.fail(err, warnings=_left_behind())
    except MemoryError as err:
        # raised wherever an allocation failed; the commands' clean-up ran on its way up
        return out.fail(_out_of_memory(str(err)), warnings=_left_behind())
    except RuntimeError as err:
        if not interrupts.no_thread(err):
            raise
        return out.fail(_out_of_memory("cannot start a thread"), warnings=_left_behind())
    except SystemError as err:
        if not _error_lost(err):
            raise
        lost = "the interpreter failed without saying why, as it does when memory runs out"
        return out.fail(_out_of_memory(lost), warnings=_left_behind())
    except OSError as err:
        # the system's own failure (no descriptor, no memory, a disk error) met where no layer
        # expected one: the commands' clean-up ran on its way up, so say what to do, no trace
        failed = _system_failure(err)
        if failed is None:
            raise
        return out.fail(failed, warnings=_left_behind())
    except KeyboardInterrupt:
        return out.fail(Interrupted("interrupted; cleaned up"))
    except BrokenPipeError:
        return 1
    finally:
        if collecting:
            gc.enable()


__all__ = ["main", "build_parser", "HANDLERS", "escape_display", "json"]
