"""The context engine: packing, the seed 000 assembler, and (later) the orchestrator."""
