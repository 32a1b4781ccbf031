"""CEL for the admission rules: the reference engine, the fast engine, and the source text both read."""
