"""``bundler completion bash|zsh|fish``: a completion script generated from the parser.

Every command, option and choice comes from :func:`bundler.cli.parsertree.read_tree`, so the
script cannot fall behind the parser. Each script tracks the command words typed so far as a
key (``/agents/export``), skipping options and the values they take, and offers that command's
sub-commands, options, choices, or file and folder names where a value is a path. zsh runs the
bash script through its ``bashcompinit`` layer, which every zsh ships.
"""

from __future__ import annotations

import argparse
import shlex

from bundler.api.display import PROGRAM
from bundler.cli.output import Output, Result
from bundler.cli.parsertree import Command, Option, read_tree
from bundler.cli.shells import SHELLS
from bundler.errors import UsageError


def _value_options(tree: Command) -> list[tuple[str, Option]]:
    """(command key, option) for every option that takes a value, at every command."""
    return [
        (node.key, option)
        for node in tree.walk()
        for option in node.options
        if option.takes_value and option.flags
    ]


def _bash_words(words: list[str]) -> str:
    return shlex.quote(" ".join(words))


def bash_script(tree: Command) -> str:
    """The bash completion script for ``tree`` (``complete -F _bundler bundler``)."""
    nodes = tree.walk()
    takes = _value_options(tree)
    value_keys = " | ".join(f'"{key} {flag}"' for key, option in takes for flag in option.flags)
    path_keys = " | ".join(f'"{node.key}"' for node in nodes if node.words)
    lines = [
        f"# bash completion for {PROGRAM}, generated from its argument parser by",
        f"# '{PROGRAM} completion bash'; regenerate it after an upgrade.",
        "_bundler() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" key="" word i skip=0',
        '    ((COMP_CWORD > 1)) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        word="${COMP_WORDS[i]}"',
        "        if ((skip)); then skip=0; continue; fi",
        '        case "$key $word" in',
        f"            {value_keys}) skip=1; continue ;;",
        "        esac",
        '        case "$key/$word" in',
        f'            {path_keys}) key="$key/$word" ;;',
        "        esac",
        "    done",
        "    COMPREPLY=()",
        '    case "$key $prev" in',
    ]
    for key, option in takes:
        pattern = " | ".join(f'"{key} {flag}"' for flag in option.flags)
        lines.append(f"        {pattern}) {_bash_value(option)}; return ;;")
    lines += ["    esac", '    case "$key" in']
    for node in nodes:
        options = [flag for option in node.options for flag in option.flags]
        words = [child.words[-1] for child in node.children]
        words += [c for positional in node.positionals for c in positional.choices]
        paths = [p for p in node.positionals if p.wants_path]
        lines += [
            f'        "{node.key}")',
            '            if [[ "$cur" == -* ]]; then',
            f'                COMPREPLY=($(compgen -W {_bash_words(options)} -- "$cur"))',
        ]
        if words:
            lines += [
                "            else",
                f'                COMPREPLY=($(compgen -W {_bash_words(words)} -- "$cur"))',
            ]
        elif paths:
            lines += ["            else", f"                {_bash_value(paths[0])}"]
        lines += ["            fi ;;"]
    lines += ["    esac", "}", f"complete -F _bundler {PROGRAM}", ""]
    return "\n".join(lines)


def _bash_value(option: Option) -> str:
    if option.choices:
        return f'COMPREPLY=($(compgen -W {_bash_words(list(option.choices))} -- "$cur"))'
    if option.wants_dir:
        return 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur"))'
    if option.wants_path:
        return 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
    return "COMPREPLY=()"


def zsh_script(tree: Command) -> str:
    """The zsh script: the bash one, run by zsh's ``bashcompinit``."""
    return "\n".join(
        [
            f"# zsh completion for {PROGRAM}, generated from its argument parser by",
            f"# '{PROGRAM} completion zsh'; source it from ~/.zshrc. It runs the bash",
            "# completion through zsh's bashcompinit, which needs compinit first.",
            "(( $+functions[compdef] )) || { autoload -U compinit && compinit }",
            "autoload -U +X bashcompinit && bashcompinit",
            bash_script(tree),
        ]
    )


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(tree: Command) -> str:
    """The fish completion script for ``tree``."""
    nodes = tree.walk()
    takes = [f"{key} {flag}" for key, option in _value_options(tree) for flag in option.flags]
    keys = [node.key for node in nodes if node.words]
    lines = [
        f"# fish completion for {PROGRAM}, generated from its argument parser by",
        f"# '{PROGRAM} completion fish'; regenerate it after an upgrade.",
        "set -g __bundler_takes_value " + " ".join(_fish_quote(t) for t in takes),
        "set -g __bundler_commands " + " ".join(_fish_quote(k) for k in keys),
        "function __bundler_key --description 'the bundler command typed so far'",
        "    set -l key ''",
        "    set -l skip 0",
        "    set -l words (commandline -opc)",
        "    set -e words[1]",
        "    for word in $words",
        "        if test $skip -eq 1",
        "            set skip 0",
        '        else if contains -- "$key $word" $__bundler_takes_value',
        "            set skip 1",
        '        else if contains -- "$key/$word" $__bundler_commands',
        '            set key "$key/$word"',
        "        end",
        "    end",
        '    echo "$key"',
        "end",
        "function __bundler_at --description 'true when the command typed so far is $argv[1]'",
        "    set -l key (__bundler_key)",
        '    test "$key" = "$argv[1]"',
        "end",
        f"complete -c {PROGRAM} -f",
    ]
    for node in nodes:
        at = "-n " + _fish_quote(f"__bundler_at {node.key or chr(34) * 2}")
        for child in node.children:
            lines.append(
                f"complete -c {PROGRAM} {at} -a {_fish_quote(child.words[-1])} "
                f"-d {_fish_quote(child.help)}"
            )
        for positional in node.positionals:
            if positional.choices:
                lines.append(
                    f"complete -c {PROGRAM} {at} -a {_fish_quote(' '.join(positional.choices))}"
                )
            elif positional.wants_path:
                lines.append(f"complete -c {PROGRAM} {at} -F")
        for option in node.options:
            parts = [f"complete -c {PROGRAM} {at}"]
            for flag in option.flags:
                parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
            if option.choices:
                parts.append(f"-x -a {_fish_quote(' '.join(option.choices))}")
            elif option.wants_dir:
                parts.append("-x -a '(__fish_complete_directories)'")
            elif option.wants_path:
                parts.append("-r -F")
            elif option.takes_value:
                parts.append("-x")
            if option.help:
                parts.append(f"-d {_fish_quote(option.help)}")
            lines.append(" ".join(parts))
    return "\n".join([*lines, ""])


GENERATORS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}


def completion(args: argparse.Namespace, out: Output) -> Result:
    """Print the completion script for ``args.shell``."""
    if args.shell not in GENERATORS:
        raise UsageError(f"no completion for {args.shell!r}: choose one of {', '.join(SHELLS)}")
    script = GENERATORS[args.shell](read_tree(args.root_parser))
    return Result(
        payload={"shell": args.shell, "script": script},
        text=[script.rstrip("\n")],
        verbatim=True,
    )


__all__ = ["SHELLS", "bash_script", "completion", "fish_script", "zsh_script"]
