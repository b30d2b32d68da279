"""What ``recover`` did, or under ``--dry-run`` would do: one :class:`Action` per step.

An action is a sentence for people, in the past tense for what was done and with "would" for
what a dry run plans, and, for ``--json``, the object ``{"action", "path", "done", "detail"}``
(05 §3). It is a ``str`` (the sentence), so callers that print or compare lines keep working.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


class Action(str):
    """One recovery step: ``action`` is the verb (``remove``, ``restore``, ``roll back`` …),
    ``path`` the entry acted on, ``done`` False under ``--dry-run`` or when left alone."""

    action: str
    path: str
    done: bool
    fix: str
    sentence: str

    def __new__(cls, sentence: str, *, action: str, path: str, done: bool, fix: str = "") -> Action:
        made = super().__new__(cls, f"{sentence}; run: {fix}" if fix else sentence)
        made.action = action
        made.path = path
        made.done = done
        made.fix = fix
        made.sentence = sentence
        return made

    def lines(self) -> list[str]:
        """The printed lines: the sentence, and the command that deals with it on its own."""
        return [f"{self.sentence}; run:", f"  {self.fix}"] if self.fix else [self.sentence]

    def under(self, root: str) -> Action:
        """The same action with a relative ``path`` made absolute below ``root``."""
        if os.path.isabs(self.path) or not self.path:
            return self
        return Action(
            self.sentence,
            action=self.action,
            path=os.path.join(root, self.path),
            done=self.done,
            fix=self.fix,
        )

    def as_json(self) -> dict[str, Any]:
        """``{"action", "path", "done", "detail"}`` (and ``fix``, the command that deals with
        what was left alone, when there is one); ``detail`` is the sentence."""
        made: dict[str, Any] = {
            "action": self.action,
            "path": self.path,
            "done": self.done,
            "detail": self.sentence,
        }
        if self.fix:
            made["fix"] = self.fix
        return made


# verb -> its past tense, for the sentences of :func:`step`
_PAST = {
    "remove": "removed",
    "restore": "restored",
    "complete": "completed",
    "roll back": "rolled back",
    "move back": "moved back",
    "re-create": "re-created",
    "write": "wrote",
    "audit": "audited",
}


def step(verb: str, path: str, text: str, *, dry_run: bool) -> Action:
    """``"<removed|would remove> <text>"``: an action on ``path`` (``text`` is already escaped
    for display and says what the path is)."""
    said = f"would {verb}" if dry_run else _PAST[verb]
    return Action(f"{said} {text}", action=verb, path=path, done=not dry_run)


def left_alone(path: str, text: str, fix: str = "") -> Action:
    """``"left alone: <text>"``: something recover found and must not touch (``fix``: the
    command that deals with it, if any)."""
    return Action(f"left alone: {text}", action="leave", path=path, done=False, fix=fix)


def lines(action: str) -> list[str]:
    """The printed lines of an action line (a command it names goes on a line of its own)."""
    return action.lines() if isinstance(action, Action) else [action]


def as_json(action: str) -> dict[str, Any]:
    """The ``--json`` object of an action line (a plain line becomes a note)."""
    if isinstance(action, Action):
        return action.as_json()
    return {"action": "note", "path": "", "done": False, "detail": action}


__all__ = ["Action", "as_json", "left_alone", "lines", "step"]


@dataclass
class RecoveryReport:
    """What one ``recover`` run did, or under ``--dry-run`` would do: its action lines in order
    (an :class:`Action` each, or a plain note)."""

    actions: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The printed lines, a command to paste on a line of its own."""
        return [line for action in self.actions for line in lines(action)]

    def as_json(self) -> dict[str, Any]:
        """The ``recover --json`` payload (without ``ok``): ``{"actions": [...]}``."""
        return {"actions": [as_json(action) for action in self.actions]}
