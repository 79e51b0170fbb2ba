"""Task-based tiered memory (L1-L4)."""
