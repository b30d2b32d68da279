"""File-system primitives: descriptor-relative walk, copy, durability, SQLite snapshots."""
