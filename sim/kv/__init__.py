"""KV memory mechanisms: the paged pool, the prefix index, the contiguous baseline allocator."""
