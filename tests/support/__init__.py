"""Helpers the tests share: real installs, bundles, registries, fault injection and hostile
inputs; none of them is a test."""
