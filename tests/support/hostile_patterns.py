"""The hostile exclusion-pattern corpus: gitignore lines no reader may take or crash on.

Each is refused wherever a pattern is read (``--exclude``: exit 2; ``--exclude-from`` and a
workspace's ``.bundlerignore``: exit 3), as one ``error:`` line naming the pattern and where it
came from, never a traceback; ``bundle verify`` warns about a bundle that carries one in its
``.bundlerignore`` (the receiver's next export of the agent would refuse).

Some pathspec rejects itself (a lone ``!``, a trailing backslash); the ranges that run backwards
it turns into a regular expression that :mod:`re` then refuses with ``re.error``, which is not
the ``ValueError`` pathspec raises, and ended every reader in a traceback.
"""

from __future__ import annotations

BAD_PATTERNS: dict[str, str] = {
    "lone_negation": "!",
    "trailing_backslash": "bad\\",
    "backwards_range": "[z-a]",
    "backwards_range_then_text": "[b-a]x",
    "backwards_escaped_range": "[\\z-\\a]",
    "backwards_range_in_a_folder": "notes/[9-0]*/",
    "negated_backwards_range": "![z-a].md",
}
