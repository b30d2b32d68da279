"""The shells ``bundler completion`` writes scripts for.

Apart from :mod:`bundler.cli.completion` so that building the parser (every command's start-up,
``--help`` included) names the choices without loading the script generators.
"""

SHELLS = ("bash", "zsh", "fish")
