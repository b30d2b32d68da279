"""Pure rules: schema, references, names, paths, values, validation, risk, secrets.

No module here does file I/O (the schema is read once from package data) or imports from
a layer above."""
