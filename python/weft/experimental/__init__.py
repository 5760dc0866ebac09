"""weft.experimental: JAX's jax.experimental names that weft keeps for programs written against them (today
weft.experimental.shard_map.shard_map, the older home of jax.shard_map)."""
