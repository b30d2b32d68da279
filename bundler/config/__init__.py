"""The install's config.toml: the one reader, the overrides, the one writer."""
