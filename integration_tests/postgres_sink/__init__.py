"""The `postgres-eos` sink: rows and options, prepared transactions never leaked, its crash
matrix."""
