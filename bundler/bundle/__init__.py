"""Bundles: closure, fragment, manifest, export, publish, verify, inspect."""
