"""One consumer's lease table: the heartbeat/checkpoint protocol over it
(`lease_coordinator`, sans-I/O), the status rendered from it and written under a term
(`status`), and where the table is kept: the status, a lease log past 100 entries
(`lease_groups`, `lease_log`, `lease_group_store`), a deleted consumer's kept table
(`kept`)."""
