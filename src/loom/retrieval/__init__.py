"""Unified retrieval: query rewriting, recall, reranking and injection (seed 002)."""
