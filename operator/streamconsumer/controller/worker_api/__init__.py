"""The worker API: what it answers, sans-I/O (`answers`), served over aiohttp (`api`) on
its listeners (`listeners`, `connection_limits`); who is calling (`auth`) and the refusals
logged (`refusals`)."""
