"""bundler: move AI agents between installations without losing data or leaking credentials."""

__version__ = "0.3.0"
