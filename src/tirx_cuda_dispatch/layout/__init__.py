"""Layout algorithms shared by the variants (pure Python over TVM's layout algebra)."""
