"""Pure, deterministic cores: no I/O, no clocks of their own (time is passed in)."""
